"""CEL, compiled one way for every rule the gateway reads from config (approval rules over
limits, the `mcp` adapter's result rules): one error class, one line naming the rule and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # cel-python (and lark, pendulum) load with the first rule: most configs have none
    import celpy
    from lark import Token, Tree


class RuleError(ValueError):
    """A rule (or template) that cannot be used; the message is one line naming it and why."""


def compile_rule(source: str) -> tuple[celpy.Environment, Tree[Token]]:
    """The environment and parse tree of `source`, or a RuleError saying where it does not parse."""
    import celpy
    from celpy.celparser import CELParseError

    env = celpy.Environment()
    try:
        return env, env.compile(source)
    except CELParseError as exc:
        column = getattr(exc, "column", None)
        where = f" at column {column}" if column else ""
        raise RuleError(f"{source!r} does not compile: syntax error{where}") from None
