"""The SQL core's primitives: the dialects, the script type, and the statements, reads, writes and
transactions declared once for the mixins that build on them (`SqlStore` implements them over its
backend's connection or writer thread)."""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

Row = Sequence[Any]
# A script (store/accounting.py): yields `(sql, params)`, is sent each statement's rows, answers a value.
Script = Generator[tuple[str, Sequence[Any]], list[Row], Any]


@dataclass(frozen=True)
class Dialect:
    name: str
    # PostgreSQL numbers its parameters ($1, $2, ...); SQLite takes `?`.
    numbered: bool
    # Appended to the row selection of `claim_due`: concurrent claimers skip each other's rows.
    skip_locked: str

    def render(self, sql: str) -> str:
        """`sql` written with `?` placeholders, in this dialect."""
        if not self.numbered:
            return sql
        counter = iter(range(1, 1000))
        return re.sub(r"\?", lambda _: f"${next(counter)}", sql)


SQLITE = Dialect("sqlite", numbered=False, skip_locked="")
POSTGRES = Dialect("postgres", numbered=True, skip_locked=" FOR UPDATE SKIP LOCKED")


class SqlHooks:
    """What a mixin of `SqlStore` may call: statements in the backend's dialect, reads, writes and
    a transaction running a script of statements."""

    @abstractmethod
    def _render(self, sql: str) -> str:
        """The statement in the backend's dialect (placeholders)."""

    @abstractmethod
    async def _read(self, sql: str, params: Sequence[Any]) -> list[Any]: ...

    @abstractmethod
    async def _write_rows(self, sql: str, params: Sequence[Any]) -> list[Any]: ...

    @abstractmethod
    async def _write_count(self, sql: str, params: Sequence[Any]) -> int: ...

    @abstractmethod
    async def _transact(self, script: Script) -> Any: ...
