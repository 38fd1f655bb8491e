"""Config validation errors as people read TOML: `[gateway] lease_tll: unknown key (did you mean
lease_ttl?)` rather than pydantic's tuple locations."""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from effectgate.adapters.settings import is_branch_tag


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    # A key that is part of an allowed one (`ca_file` of `client_ca_file`) first, then spelling.
    close = [c for c in choices if len(word) >= 3 and word in c]
    close = close or difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _unwrap(tp: Any) -> Any:
    """`X | None` -> X (optional tables such as [server.tls])."""
    while get_origin(tp) in (Union, types.UnionType):
        tp = next(a for a in get_args(tp) if a is not type(None))
    return tp


def _element(tp: Any) -> Any:
    """`tuple[X, ...]`, `dict[str, X]`, `frozenset[X]` -> X."""
    args = [a for a in get_args(_unwrap(tp)) if a is not Ellipsis]
    return _unwrap(args[-1]) if args else None


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _render(root: type[BaseModel], doc: Any, loc: tuple[int | str, ...]) -> tuple[str, str, list[str]]:
    """(table, key, keys allowed in that table) for an error location."""
    tp: Any = root
    node: Any = doc
    table: list[str] = []
    item = ""  # "#2 (bot)" inside an array of tables
    key = ""
    allowed: list[str] = sorted(root.model_fields)
    for index, part in enumerate(loc):
        if _is_model(tp) and isinstance(part, str):
            allowed = sorted(name for name, f in tp.model_fields.items() if not f.exclude)
            if index == len(loc) - 1 or part not in tp.model_fields:
                key = part
                break
            tp = _unwrap(tp.model_fields[part].annotation)
            node = node.get(part) if isinstance(node, dict) else None
            # An array of tables (`tuple[Model, ...]`) is a table; an array of values is a key.
            if _is_model(tp) or get_origin(tp) is dict or (get_origin(tp) is tuple and _is_model(_element(tp))):
                table.append(part)
                continue
            key = part + "".join(f"[{p}]" for p in loc[index + 1 :])
            break
        # A dict key or a list index: the element type.
        tp = _element(tp)
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else None
            name = node.get("name") if isinstance(node, dict) else None
            item = f" #{part + 1}" + (f" ({name})" if name else "")
        else:
            table.append(part)
            node = node.get(part) if isinstance(node, dict) else None
    dotted = ".".join(table)
    head = f"[[{dotted}]]{item}" if item else (f"[{dotted}]" if dotted else "")
    return head, key, allowed


def _phrase(problem: Any, first: bool) -> str:
    """What is wrong with one value, in the file's words; `first` False for another form the
    same key accepts (`or 'auto'`)."""
    if problem["type"] == "literal_error":
        expected = problem.get("ctx", {}).get("expected", "")
        return f"or {expected}" if not first else f"{_value(problem)} must be {expected}".lstrip()
    message = str(problem["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    message = message[:1].lower() + message[1:]
    shown = _value(problem)
    if not first:
        return f"or {message}"
    # Our own validators name the value as they see fit; pydantic's type errors do not.
    own = problem["type"] == "value_error"
    return message if own or not shown or shown in message else f"{shown}: {message}"


def _value(problem: Any) -> str:
    shown = problem.get("input")
    return "" if shown is None or isinstance(shown, dict | list) else repr(shown)


def describe(root: type[BaseModel], doc: Any, error: ValidationError) -> list[str]:
    """One phrase per problem, each naming its table and key once. A value that fits none of a
    key's forms (`consistency_window`: a duration or "auto") is one phrase listing the forms."""
    out: list[str] = []
    alternatives: dict[str, list[str]] = {}  # "[table] key" -> what each form wanted
    for problem in error.errors(include_url=False):
        loc = tuple(p for p in problem["loc"] if not is_branch_tag(p))
        table, key, allowed = _render(root, doc, loc)
        kind = problem["type"]
        where = " ".join(p for p in (table, key) if p)
        if kind == "extra_forbidden":
            if not table:
                out.append(f"[{key}]: unknown section{did_you_mean(key, allowed)} (allowed: {', '.join(allowed)})")
                continue
            out.append(f"{where}: unknown key{did_you_mean(key, allowed)} (allowed: {', '.join(allowed)})")
        elif kind == "missing":
            out.append(f"{where}: required")
        else:
            forms = alternatives.setdefault(where, [])
            if not forms:
                out.append(where)  # placeholder, filled below in the order of the file's errors
            forms.append(_phrase(problem, first=not forms))
    return [f"{line}: {' '.join(alternatives[line])}" if line in alternatives else line for line in out]
