"""An event row as the database keeps it, for `effectgate audit verify` (check.py): every column
read as stored, then decoded here field by field, so that a row a person edited by hand is named
with what was expected and what was found instead of failing the decode that trusted it.

SQLite keeps any value in any column (the tables are not STRICT): an integer or a blob where text
belongs, text where a time or a position belongs, and text that is not UTF-8 (which `sqlite3`
refuses to fetch at all). So each column is selected with its storage class (`typeof`), and text
and blobs as their bytes. PostgreSQL types every column (and keeps text valid UTF-8), so its
columns are selected as they are; only their values can be wrong (a state that is not a state, a
detail that is not JSON, a time that is NaN).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from effectgate.gateway.model import ActionEvent, EventRowBroken, State, TrailEvent

# TRAIL_SELECTED's columns (chain.py), in its order.
COLUMNS = (
    "seq", "action_id", "at", "kind", "state", "principal", "note", "detail",
    "tenant", "tool", "n", "prev_hash", "hash",
)  # fmt: skip
TEXT = frozenset({"action_id", "kind", "state", "principal", "note", "detail", "tenant", "tool", "prev_hash", "hash"})
STATES = tuple(s.value for s in State)
_AT = {column: i for i, column in enumerate(COLUMNS)}
_SHOWN = 80  # characters of a found value a report shows


def selected(postgres: bool, columns: Sequence[str] = COLUMNS) -> str:
    """The select list of stored `columns`: `(class, value)` each on SQLite, the values on PostgreSQL."""
    if postgres:
        return ", ".join(columns)
    return ", ".join(
        f"typeof({c}), CASE WHEN typeof({c}) IN ('text', 'blob') THEN CAST({c} AS BLOB) ELSE {c} END" for c in columns
    )


@dataclass(frozen=True)
class Misfit:
    """A column whose stored value is not what the trail keeps there."""

    column: str
    problem: str
    expected: str
    found: str


@dataclass(frozen=True)
class StoredRow:
    """One event row: each column's storage class ("null", "integer", "real", "text", "blob") and
    value (text as `str` when it is UTF-8, else as its bytes)."""

    classes: tuple[str, ...]
    values: tuple[Any, ...]

    def get(self, column: str) -> Any:
        return self.values[_AT[column]]

    def storage(self, column: str) -> str:
        return self.classes[_AT[column]]

    @property
    def seq(self) -> int:
        seq = self.get("seq")
        return seq if isinstance(seq, int) else 0

    def misfit(self) -> Misfit | None:
        """The first column (in COLUMNS order) that does not decode, or None."""
        for column, storage, value in zip(COLUMNS, self.classes, self.values, strict=True):
            found = _misfit(column, storage, value)
            if found is not None:
                return found
        return None

    def checked(self) -> TrailEvent:
        """The row decoded, for the reads that answer with events (ListEvents, the notifications'
        deliverer); raises EventRowBroken naming the row and its first misfit."""
        found = self.misfit()
        if found is None:
            return self.event()
        tenant, n = self.get("tenant"), self.get("n")
        raise EventRowBroken(
            tenant=tenant if isinstance(tenant, str) else shown(self.storage("tenant"), tenant),
            seq=str(self.get("seq")),
            n=str(n) if isinstance(n, int) else shown(self.storage("n"), n),
            column=found.column,
            problem=found.problem,
            expected=found.expected,
            found=found.found,
        )

    def event(self) -> TrailEvent:
        """The row decoded; only for a row without a misfit."""
        v = dict(zip(COLUMNS, self.values, strict=True))
        event = ActionEvent(
            seq=v["seq"],
            action_id=v["action_id"],
            at=float(v["at"]),
            kind=v["kind"],
            state=State(v["state"]),
            principal=v["principal"],
            note=v["note"],
            detail=json.loads(v["detail"]),
        )
        return TrailEvent(
            event, v["tenant"], v["tool"], n=v["n"], prev_hash=v["prev_hash"], hash=v["hash"], detail_json=v["detail"]
        )


def stored_row(row: Sequence[Any], postgres: bool) -> StoredRow:
    """A row selected with `selected(postgres)`."""
    return StoredRow(*stored_values(row, postgres))


def stored_values(row: Sequence[Any], postgres: bool) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The storage classes and values of a row selected with `selected(postgres, ...)`."""
    if postgres:
        return tuple(_class_of(value) for value in row), tuple(row)
    classes = tuple(str(c) for c in row[0::2])
    return classes, tuple(_text(cls, value) for cls, value in zip(classes, row[1::2], strict=True))


def shown(storage: str, value: Any) -> str:
    """A stored value as a report shows it: its class, then the value (bytes in hex), cut short."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        text = f"X'{value.hex()}'"
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    else:
        text = repr(value)
    if len(text) > _SHOWN:
        text = text[: _SHOWN - 3] + "..."
    return f"{storage} {text}"


def _class_of(value: Any) -> str:
    """PostgreSQL: the class a driver's value stands for."""
    if value is None:
        return "null"
    if isinstance(value, bool | int):
        return "integer"
    if isinstance(value, float):
        return "real"
    return "text" if isinstance(value, str) else "blob"


def _text(storage: str, value: Any) -> Any:
    """SQLite: text as `str` when its bytes are UTF-8 (left as bytes when they are not)."""
    if storage == "text" and isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value


def _misfit(column: str, storage: str, value: Any) -> Misfit | None:
    """The column's misfit (what it shows is only rendered for one: the walk checks every row)."""
    if column in TEXT:
        if storage == "text" and isinstance(value, bytes):
            return Misfit(column, f"{column} is not UTF-8 text", "UTF-8 text", shown(storage, value))
        if not isinstance(value, str):
            return Misfit(column, f"{column} is not text", "text", shown(storage, value))
        if column == "state" and value not in STATES:
            return Misfit(column, "state is not a state", "one of " + ", ".join(STATES), shown(storage, value))
        if column == "detail":
            return _detail_misfit(storage, value)
        return None
    if column == "at":
        if not isinstance(value, float) or not math.isfinite(value):
            expected = "a finite real number (seconds since the epoch)"
            return Misfit(column, "at is not a time", expected, shown(storage, value))
        return None
    # seq and n: integers (n > 0 is where the walk looks).
    if not isinstance(value, int) or isinstance(value, bool):
        what = "a row id" if column == "seq" else "a position"
        return Misfit(column, f"{column} is not {what}", "an integer", shown(storage, value))
    return None


def _detail_misfit(storage: str, text: str) -> Misfit | None:
    try:
        detail = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        return Misfit("detail", "detail is not JSON", f"a JSON object ({exc})", shown(storage, text))
    if not isinstance(detail, dict):
        return Misfit("detail", "detail is not a JSON object", "a JSON object", shown(storage, text))
    return None


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (the gateway never writes them)."""
    raise ValueError(f"{name} is not JSON")
