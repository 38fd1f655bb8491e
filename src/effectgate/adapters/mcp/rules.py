"""The `mcp` adapter's small languages: CEL rules over a tool's result, and argument templates.

A rule is a CEL expression (cel-python) compiled when the config is read. It sees:

- `result`: the upstream's answer as a JSON document: its `structuredContent`, else its first
  text block parsed as JSON, else `{"text": "<the text>"}`;
- `payload`: the action's payload (the model's arguments);
- `action`: `action_id`, `provider_key`, `scope`, `tool`, `tenant`.

A rule that fails at run time (a missing field, a type error) does not hold: a match then proves
nothing (UNKNOWN, never CONFIRMED), an absence rule proves nothing (never NOT_FOUND).

An argument template is a JSON value whose strings may hold `{name}` placeholders over the
payload's fields and the action's names: a string that is one placeholder keeps the value's type
(`"{labels}"` stays a list), any other string is filled as text; `{{` and `}}` are literal braces.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from celpy.adapter import json_to_cel
from celpy.celtypes import BoolType, ListType, MapType

from effectgate.cel import RuleError as RuleError
from effectgate.cel import compile_rule

VARIABLES = ("result", "payload", "action")
_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_WHOLE = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")


# How many activations a rule remembers its verdict for (`Rule.holds`).
REMEMBERED = 256


class Rule:
    def __init__(self, source: str) -> None:
        self.source = source
        env, tree = compile_rule(source)
        self._program = env.program(tree)
        # CEL has no side effects and no clock: a verdict is a function of the activation alone.
        # cel-python interprets the parse tree at every call (~0.5 ms), and the same action's
        # result is read again and again (each read-back of a lost answer, each replica's), so a
        # verdict is kept by the activation's JSON text (the adapter passes JSON documents; the
        # text keeps their key order, which CEL may see).
        self._verdicts: OrderedDict[str, bool] = OrderedDict()

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        """The rule's value as plain Python; raises on a run-time error."""
        return _plain(self._program.evaluate({k: json_to_cel(v) for k, v in activation.items()}))

    def holds(self, activation: Mapping[str, Any]) -> bool:
        try:
            key = _as_json(activation)
        except (TypeError, ValueError):  # NaN, a cycle: judged each time, not remembered
            return self._judge(activation)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = self._judge(activation)
            if len(self._verdicts) > REMEMBERED:
                self._verdicts.popitem(last=False)
        else:
            self._verdicts.move_to_end(key)
        return verdict

    def _judge(self, activation: Mapping[str, Any]) -> bool:
        try:
            result = self._program.evaluate({k: json_to_cel(v) for k, v in activation.items()})
        except Exception:  # a missing field or a type error proves nothing
            return False
        return isinstance(result, BoolType) and bool(result)


_as_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _plain(value: Any) -> Any:
    if isinstance(value, BoolType):
        return bool(value)
    if isinstance(value, MapType):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, ListType):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def names(template: Any) -> set[str]:
    """The placeholder names in a template; a stray brace is a RuleError."""
    if isinstance(template, str):
        found: set[str] = set()

        def one(m: re.Match[str]) -> str:
            if m.group(1):
                found.add(m.group(1))
            return ""

        rest = _TOKEN.sub(one, template)
        if "{" in rest or "}" in rest:
            raise RuleError(f"{template!r}: a stray brace (write {{{{ or }}}} for a literal one)")
        return found
    if isinstance(template, Mapping):
        return set().union(*(names(v) for v in template.values())) if template else set()
    if isinstance(template, list):
        return set().union(*(names(v) for v in template)) if template else set()
    return set()


def fill(template: Any, values: Mapping[str, Any]) -> Any:
    """The template with its placeholders replaced (a missing value is a KeyError)."""
    if isinstance(template, str):
        whole = _WHOLE.match(template)
        if whole:
            return values[whole.group(1)]
        return _TOKEN.sub(lambda m: m.group(0)[0] if not m.group(1) else _text(values[m.group(1)]), template)
    if isinstance(template, Mapping):
        return {str(k): fill(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, values) for v in template]
    return template


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)
