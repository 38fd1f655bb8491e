"""Stripe's wire formats the simulator reads: bracketed form bodies and search queries."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

JsonDict = dict[str, Any]

_KEY_PART = re.compile(r"\[([^\]]*)\]")


def parse_form(items: Iterable[tuple[str, str]]) -> JsonDict:
    """Decodes the SDK's form encoding: `metadata[k]=v` -> dict, `types[0]=card` -> list.

    Values stay strings, as Stripe receives them; endpoints convert what they need.
    """
    root: JsonDict = {}
    for raw_key, value in items:
        head, _, rest = raw_key.partition("[")
        path = [head, *_KEY_PART.findall("[" + rest)] if rest else [head]
        node = root
        for part in path[:-1]:
            child = node.setdefault(part or str(len(node)), {})
            if not isinstance(child, dict):
                raise ValueError(f"conflicting form keys at {raw_key!r}")
            node = child
        # `a[]=x` appends: an index key, turned into a list below like `a[0]=x`.
        node[path[-1] or str(len(node))] = value
    # Metadata keys are free text ("0" included): never turned into a list.
    return {k: v if k == "metadata" else _lists_from_indexes(v) for k, v in root.items()}


def _lists_from_indexes(value: Any) -> Any:
    if isinstance(value, dict):
        converted = {k: _lists_from_indexes(v) for k, v in value.items()}
        if converted and all(k.isdigit() for k in converted):
            return [converted[k] for k in sorted(converted, key=int)]
        return converted
    if isinstance(value, list):
        return [_lists_from_indexes(v) for v in value]
    return value


@dataclass(frozen=True)
class Clause:
    """One equality test: `field` is "metadata" (with `key`) or a top-level field name."""

    field: str
    value: str | int
    key: str = ""


class QueryError(ValueError):
    pass


_STRING = r"""(?P<{n}q>['"])(?P<{n}>(?:\\.|(?!(?P={n}q)).)*)(?P={n}q)"""
_CLAUSE = re.compile(
    r"\s*(?:metadata\[" + _STRING.format(n="mkey") + r"\]|(?P<field>[a-z_]+))"
    r"\s*:\s*(?:" + _STRING.format(n="sval") + r"|(?P<nval>-?\d+))\s*"
)
_AND = re.compile(r"AND\s+")
_ESCAPE = re.compile(r"\\(.)")


def parse_search_query(query: str) -> list[Clause]:
    """Parses the equality subset of Stripe's search language, clauses joined with AND:
    `metadata['k']:'v'`, `status:'succeeded'`, `amount:1000`."""
    clauses: list[Clause] = []
    pos = 0
    while True:
        m = _CLAUSE.match(query, pos)
        if m is None:
            raise QueryError(f"unsupported search query syntax at position {pos}")
        if m.group("nval") is not None:
            value: str | int = int(m.group("nval"))
        else:
            value = _ESCAPE.sub(r"\1", m.group("sval"))
        if m.group("mkey") is not None:
            clauses.append(Clause("metadata", value, key=_ESCAPE.sub(r"\1", m.group("mkey"))))
        else:
            clauses.append(Clause(m.group("field"), value))
        pos = m.end()
        if pos == len(query):
            return clauses
        joiner = _AND.match(query, pos)
        if joiner is None:
            raise QueryError(f"expected AND at position {pos} (only AND is supported)")
        pos = joiner.end()


def matches(obj: JsonDict, clauses: list[Clause]) -> bool:
    for clause in clauses:
        source = (obj.get("metadata") or {}) if clause.field == "metadata" else obj
        actual = source.get(clause.key if clause.field == "metadata" else clause.field)
        if actual is None or str(actual) != str(clause.value):
            return False
    return True


def quote(value: str) -> str:
    """A string literal for a search query (the inverse of the parser's unescaping)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
