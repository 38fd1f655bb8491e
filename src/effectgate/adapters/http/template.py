"""The small, explicit template and postcondition language of the generic HTTP adapter.

Templates: `{name}` is replaced by a value; nothing else is interpreted (no expressions, no
attribute access, no format specs), so a config cannot run code and a payload value cannot inject
a placeholder. `{{` and `}}` are literal braces. Names are the payload's top-level fields plus
`action_id`, `provider_key`, `scope`, `tool` and `tenant`.

- In a URL, each value is percent-encoded (it cannot add a path segment or a query parameter),
  and a value in the path (before `?`) may not be empty, `.` or `..`: those would remove or
  replace a segment once the URL is resolved (`/customers/../activate` is `/activate`).
- In a JSON body template (a table), string leaves are templates; a leaf that is exactly one
  `{name}` takes the value with its JSON type (numbers stay numbers).
- protobuf Struct numbers are doubles, so integral values are used as integers (1250, not 1250.0).

Postconditions (`expect`, `response_expect`, `absent_when`) are tables with a `path` (dotted,
list indexes as numbers: `items.0.id`; `""` is the whole document) and exactly one test:

    { path = "status", equals = "ACTIVE" }      the value equals the template
    { path = "activated_at", present = true }   the value is there and not null
    { path = "data", count = 0 }                a list of exactly N rows ("no rows": count = 0)
    { path = "data", some = [ ...conds ] }      at least one row meets every inner condition
    { path = "data", one  = [ ...conds ] }      exactly one row does (a duplicate fails it)
    { path = "data", none = [ ...conds ] }      the value is a list and no row does

Inner conditions' paths are relative to the row.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from effectgate.adapters.base import ConfigError

_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")
_WHOLE = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")
MISSING = object()
_UNSAFE_SEGMENTS = frozenset({"", ".", ".."})
_TESTS = ("equals", "present", "count", "some", "one", "none")


class UnsafeValue(ValueError):
    """A payload value that would change a URL's path (empty, `.` or `..` in a path placeholder)."""

    def __init__(self, name: str, value: str) -> None:
        super().__init__(f"{name}: {value!r} is not allowed in a URL path (empty, '.' and '..' change the path)")
        self.name = name


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


def path_names(url: str) -> set[str]:
    """The placeholders in a URL template's path (before the first literal `?`)."""
    return names(url.split("?", 1)[0])


def fill(template: str, values: Mapping[str, Any], *, url: bool = False) -> str:
    """The template with its placeholders replaced; `url=True` percent-encodes each value and
    raises `UnsafeValue` for a value that would change the path."""
    path_end = template.find("?") if url else -1

    def one(m: re.Match[str]) -> str:
        token = m.group(0)
        if token in ("{{", "}}"):
            return token[0]
        text = _text(values[m.group(1)])
        if not url:
            return text
        if (path_end < 0 or m.start() < path_end) and text in _UNSAFE_SEGMENTS:
            raise UnsafeValue(m.group(1), text)
        return quote(text, safe="")

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
    """The value at a dotted path (`items.0.id`), or MISSING; `""` is the document itself."""
    node = doc
    for part in path.split(".") if path else []:
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node


class Postcondition(BaseModel):
    """One test on a response document (see the module doc for the forms)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    # TOML has no null, so None means "not given".
    equals: Any = None
    present: bool | None = None
    count: int | None = Field(default=None, ge=0)
    some: list[Postcondition] | None = None
    one: list[Postcondition] | None = None
    none: list[Postcondition] | None = None

    @field_validator("equals")
    @classmethod
    def _braces(cls, value: Any) -> Any:
        try:
            names_in(value)  # a stray brace fails now, not at the first call
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _one_test(self) -> Postcondition:
        given = [t for t in _TESTS if getattr(self, t) is not None]
        if len(given) != 1 or self.present is False:
            raise ValueError(f"give `path` and exactly one of {', '.join(_TESTS)} (present must be true)")
        for rows in (self.some, self.one, self.none):
            if rows is not None and not rows:
                raise ValueError("a row test (some, one, none) needs at least one inner condition")
        return self

    def names(self) -> set[str]:
        inner = [c for rows in (self.some, self.one, self.none) if rows for c in rows]
        return names_in(self.equals).union(*(c.names() for c in inner))

    def failure(self, doc: Any, values: Mapping[str, Any]) -> str:
        """Why the postcondition does not hold on `doc` ("" when it holds)."""
        where = self.path or "the document"
        got = lookup(doc, self.path)
        if self.present:
            return "" if got is not MISSING and got is not None else f"{where} is missing"
        if got is MISSING:
            return f"{where} is missing"
        if self.equals is not None:
            want = fill_json(self.equals, values)
            return "" if _same(got, want) else f"{where} is {_short(got)}, expected {_short(want)}"
        if not isinstance(got, list):
            return f"{where} is not a list"
        if self.count is not None:
            return "" if len(got) == self.count else f"{where} has {len(got)} rows, expected {self.count}"
        conds = self.some or self.one or self.none or []
        matching = sum(1 for row in got if not failures(conds, row, values))
        if self.some is not None:
            return "" if matching else f"{where}: no row matches"
        if self.one is not None:
            return "" if matching == 1 else f"{where}: {matching} rows match, expected exactly one"
        return "" if not matching else f"{where}: {matching} rows match, expected none"


def parse_all(where: str, tables: Any) -> list[Postcondition]:
    """Postconditions from a list of tables (the settings model does this for adapters)."""
    if tables is None:
        return []
    if not isinstance(tables, list):
        raise ConfigError(f"{where}: expected a list of postcondition tables")
    try:
        return [Postcondition.model_validate(t) for t in tables]
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


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
    # Callers pass documents that are already scrubbed of secrets (see redact.scrub_json).
    text = repr(_plain(value))
    return text if len(text) <= 60 else text[:60] + "…"
