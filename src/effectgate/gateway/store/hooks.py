"""The SQL core's primitives, declared once for the mixins that build on them (`SqlStore`
implements them over its backend's connection or writer thread)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # story's rows import the mixins' modules: the type only
    from effectgate.gateway.store.story import Script


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
