"""The kit's in-memory store passes the same conformance suite as SQLite and PostgreSQL, so the
in-process protocol tests run on the store semantics the gateway really has."""

from __future__ import annotations

import pytest

from effectgate.gateway.store import Store, StoreUnavailable
from effectgate.testing.store import MemoryDatabase, MemoryStore
from tests.store_backends import Backend
from tests.store_conformance import StoreConformance


class MemoryBackend(Backend):
    name = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.database = MemoryDatabase()

    @property
    def url(self) -> str:
        return "memory://"

    @property
    def unreachable_url(self) -> str:
        return "memory://down"

    async def store(self, *, open_it: bool = True) -> Store:
        store = MemoryStore(self.database)
        self._stores.append(store)
        if open_it:
            await store.open()
        return store

    async def block_writes(self) -> None:
        self.database.read_only = True

    async def unblock_writes(self) -> None:
        self.database.read_only = False


class TestMemoryStoreConformance(StoreConformance):
    @pytest.fixture
    def backend(self) -> MemoryBackend:
        return MemoryBackend()

    async def test_unreachable_store_fails_closed(self, backend: Backend) -> None:
        # `open_store` knows no memory scheme: a database that is down stands in for it.
        assert isinstance(backend, MemoryBackend)
        backend.database.down = True
        store = await backend.store(open_it=False)
        with pytest.raises(StoreUnavailable):
            await store.open()
        await store.close()


async def test_write_faults_let_reads_through() -> None:
    db = MemoryDatabase()
    store = MemoryStore(db)
    await store.open()
    db.fail_writes_after(1)
    assert await store.purge("x", 0.0) == 0
    with pytest.raises(StoreUnavailable):
        await store.purge("x", 0.0)
    assert await store.get("a") is None and db.writes == 2
    db.heal()
    assert await store.purge("x", 0.0) == 0
