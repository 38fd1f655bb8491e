"""`require_approval_when`: CEL rules (cel-python), compiled once at start-up.

A rule sees `amount`, `currency`, `scope`, `run_id`, `step_id`, `agent`, the payload's fields as
`payload.NAME`, and what is left of the tool's limits for the tenant: `budget_left`,
`effects_left` (this window) and `run_spent`, `run_effects` (this run). A rule that does not
compile, names another variable or a field the payload does not have, is refused at start-up
(`effectgate check`) with one line; a rule that fails at run time holds the action (fails closed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from effectgate.cel import RuleError as RuleError
from effectgate.cel import compile_rule

if TYPE_CHECKING:
    from lark import Tree

# cel-python (with lark and pendulum: a tenth of a second of imports) is loaded by the first
# Rule's compile_rule, not with this module: a gateway whose tools have no rule never loads it.

log = logging.getLogger("effectgate.limits")

VARIABLES = (
    "amount",
    "currency",
    "scope",
    "run_id",
    "step_id",
    "agent",
    "payload",
    "budget_left",
    "effects_left",
    "run_spent",
    "run_effects",
)
# Variables that need the tool's counters read before the claim.
USAGE_VARIABLES = frozenset({"budget_left", "effects_left", "run_spent", "run_effects"})


class Rule:
    def __init__(self, source: str, payload_fields: Iterable[str]) -> None:
        self.source = source
        env, tree = compile_rule(source)
        fields = set(payload_fields)
        self.names = _names(tree)
        for name in sorted(self.names):
            if name not in VARIABLES:
                raise RuleError(f"{source!r} names {name!r}, not a variable (known: {', '.join(VARIABLES)})")
        for name in sorted(_payload_fields(tree)):
            if name not in fields:
                raise RuleError(
                    f"{source!r} names payload.{name}, not a field of the payload ({', '.join(sorted(fields))})"
                )
        self._program = env.program(tree)

    def holds(self, activation: Mapping[str, Any]) -> bool:
        from celpy.adapter import json_to_cel  # loaded by compile_rule: a lookup, not a load
        from celpy.celtypes import BoolType

        try:
            result = self._program.evaluate({name: json_to_cel(value) for name, value in activation.items()})
        except Exception as exc:  # a type error at run time: hold the action rather than let it pass
            log.warning("approval rule %r failed (%s): the action is held for approval", self.source, exc)
            return True
        if isinstance(result, BoolType):
            return bool(result)
        log.warning("approval rule %r gave %r, not a bool: the action is held for approval", self.source, result)
        return True


def _names(tree: Tree[Any]) -> set[str]:
    """The top-level identifiers the expression reads (not function names, not member fields)."""
    from lark import Token

    found: set[str] = set()
    for sub in tree.iter_subtrees():
        if sub.data == "ident" or (sub.data == "primary" and sub.children and isinstance(sub.children[0], Token)):
            for child in sub.children:
                if isinstance(child, Token) and child.type == "IDENT":
                    found.add(str(child))
    return found


def _payload_fields(tree: Tree[Any]) -> set[str]:
    """NAME of every `payload.NAME`."""
    from lark import Token, Tree

    found: set[str] = set()
    for sub in tree.iter_subtrees():
        if sub.data != "member_dot" or len(sub.children) < 2:
            continue
        target, name = sub.children[0], sub.children[1]
        if isinstance(target, Tree) and _is_ident(target, "payload") and isinstance(name, Token):
            found.add(str(name))
    return found


def _is_ident(tree: Tree[Any], name: str) -> bool:
    from lark import Token, Tree

    while isinstance(tree, Tree):
        if tree.data == "ident":
            return any(isinstance(c, Token) and str(c) == name for c in tree.children)
        if len(tree.children) != 1:
            return False
        tree = tree.children[0]
    return False
