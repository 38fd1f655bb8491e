"""The small, explicit template and postcondition language of the generic HTTP adapter.

Templates: `{name}` is replaced by a value; nothing else is interpreted (no expressions, no
attribute access, no format specs), so a config cannot run code and a payload value cannot inject
a placeholder. `{{` and `}}` are literal braces. Names are the payload's top-level fields plus
`action_id`, `provider_key`, `scope`, `tool` and `tenant`.

- In a URL, each value is percent-encoded (it cannot add a path segment or a query parameter).
- In a JSON body template (a table), string leaves are templates; a leaf that is exactly one
  `{name}` takes the value with its JSON type (numbers stay numbers).
- protobuf Struct numbers are doubles, so integral values are used as integers (1250, not 1250.0).

Postconditions (`expect`, `response_expect`, `absent_when`) are tables:
`{ path = "a.b.0", equals = "<template>" }` or `{ path = "a.b", present = true }` (non-null).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from effectgate.adapters.base import ConfigError

_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")
_WHOLE = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")
MISSING = object()


def _plain(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def names(template: str) -> set[str]:
    """The placeholder names of a template; a stray brace is a ConfigError."""
    found = set()
    for m in _TOKEN.finditer(template):
        if m.group(0) in ("{", "}"):
            raise ConfigError(f"template {template!r}: unmatched brace (write {{{{ or }}}})")
        if m.group(1):
            found.add(m.group(1))
    return found


def names_in(doc: Any) -> set[str]:
    """Placeholder names anywhere in a JSON template (strings, tables, lists)."""
    if isinstance(doc, str):
        return names(doc)
    if isinstance(doc, Mapping):
        return set().union(*(names_in(v) for v in doc.values())) if doc else set()
    if isinstance(doc, list):
        return set().union(*(names_in(v) for v in doc)) if doc else set()
    return set()


def fill(template: str, values: Mapping[str, Any], *, url: bool = False) -> str:
    def one(m: re.Match[str]) -> str:
        token = m.group(0)
        if token in ("{{", "}}"):
            return token[0]
        text = _text(values[m.group(1)])
        return quote(text, safe="") if url else text

    return _TOKEN.sub(one, template)


def fill_json(doc: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(doc, str):
        whole = _WHOLE.match(doc)
        return _plain(values[whole.group(1)]) if whole else fill(doc, values)
    if isinstance(doc, Mapping):
        return {str(k): fill_json(v, values) for k, v in doc.items()}
    if isinstance(doc, list):
        return [fill_json(v, values) for v in doc]
    return doc


def _text(value: Any) -> str:
    value = _plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def lookup(doc: Any, path: str) -> Any:
    """The value at a dotted path (`items.0.id`), or MISSING."""
    node = doc
    for part in path.split(".") if path else []:
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node


@dataclass(frozen=True)
class Postcondition:
    path: str
    equals: Any = None  # a template (string) or a literal
    present: bool = False

    @classmethod
    def parse(cls, where: str, table: Any) -> Postcondition:
        if not isinstance(table, Mapping) or not isinstance(table.get("path"), str):
            raise ConfigError(f"{where}: each postcondition is a table with a string `path`")
        extra = set(table) - {"path", "equals", "present"}
        if extra or ("equals" in table) == bool(table.get("present")):
            raise ConfigError(f"{where}: give `path` and exactly one of `equals` or `present = true`")
        if isinstance(table.get("equals"), str):
            names(table["equals"])  # validate braces now
        return cls(path=table["path"], equals=table.get("equals"), present=bool(table.get("present")))

    def names(self) -> set[str]:
        return names_in(self.equals)

    def failure(self, doc: Any, values: Mapping[str, Any]) -> str:
        """Why the postcondition does not hold on `doc` ("" when it holds)."""
        got = lookup(doc, self.path)
        if self.present:
            return "" if got is not MISSING and got is not None else f"{self.path} is missing"
        want = fill_json(self.equals, values)
        if got is MISSING:
            return f"{self.path} is missing"
        return "" if _same(got, want) else f"{self.path} is {_short(got)}, expected {_short(want)}"


def parse_all(where: str, tables: Any) -> list[Postcondition]:
    if tables is None:
        return []
    if not isinstance(tables, list):
        raise ConfigError(f"{where}: expected a list of postcondition tables")
    return [Postcondition.parse(f"{where}[{i}]", t) for i, t in enumerate(tables)]


def failures(conds: Iterable[Postcondition], doc: Any, values: Mapping[str, Any]) -> list[str]:
    return [f for f in (c.failure(doc, values) for c in conds) if f]


def _same(got: Any, want: Any) -> bool:
    # Numbers compare by value (JSON 100 == Struct 100.0), but a bool is never a number.
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(got, int | float) and isinstance(want, int | float):
        return float(got) == float(want)
    if isinstance(got, int | float) and isinstance(want, str):
        return _text(got) == want
    return bool(got == want)


def _short(value: Any) -> str:
    text = repr(_plain(value))
    return text if len(text) <= 60 else text[:60] + "…"
