"""The backends the store conformance suite runs on, behind one small harness interface.

Each harness hands out opened stores on one shared database and can make that database refuse
writes, so the suite itself never needs to know which engine it is talking to.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import asyncpg

from effectgate.adapters.base import Observation, Outcome, Receipt
from effectgate.gateway.model.domain import ActionRecord, NextStep, State
from effectgate.gateway.store import Store, open_store
from tests import pg
from tests.ports import closed_port


class Backend(ABC):
    name: str

    def __init__(self) -> None:
        self._stores: list[Store] = []

    @property
    @abstractmethod
    def url(self) -> str: ...

    @property
    @abstractmethod
    def unreachable_url(self) -> str:
        """A URL of this scheme whose store cannot be opened."""

    async def store(self, *, open_it: bool = True) -> Store:
        """A new store instance on the shared database (closed at teardown)."""
        store = open_store(self.url)
        self._stores.append(store)
        if open_it:
            await store.open()
        return store

    @abstractmethod
    async def block_writes(self) -> None:
        """From now on the database refuses (or cannot take) writes; reads still work."""

    @abstractmethod
    async def unblock_writes(self) -> None: ...

    async def aclose(self) -> None:
        for store in self._stores:
            await store.close()


class SqliteBackend(Backend):
    name = "sqlite"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__()
        self.path = tmp_path / "actions.db"
        self.tmp_path = tmp_path
        self._locker: sqlite3.Connection | None = None

    @property
    def url(self) -> str:
        # A short busy timeout keeps the blocked-writer test quick.
        return f"sqlite:///{self.path}?busy_timeout_ms=300"

    @property
    def unreachable_url(self) -> str:
        # A file that is not a database.
        garbage = self.tmp_path / "not-a-database.db"
        garbage.write_bytes(b"this is not an SQLite file" * 100)
        return f"sqlite:///{garbage}"

    async def block_writes(self) -> None:
        # Another process holding the write lock: file permissions would not stop root (CI).
        self._locker = sqlite3.connect(self.path, isolation_level=None)
        self._locker.execute("BEGIN EXCLUSIVE")

    async def unblock_writes(self) -> None:
        if self._locker is not None:
            self._locker.execute("ROLLBACK")
            self._locker.close()
            self._locker = None

    async def aclose(self) -> None:
        await self.unblock_writes()
        await super().aclose()


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, admin_dsn: str) -> None:
        super().__init__()
        self.admin_dsn = admin_dsn
        self.database = ""
        self.dsn = ""
        self._closed = ExitStack()  # ports held where nothing listens, released at aclose

    async def create(self) -> None:
        self.database, self.dsn = await pg.create_database(self.admin_dsn)

    @property
    def url(self) -> str:
        return self.dsn

    @property
    def unreachable_url(self) -> str:
        # A port held until aclose: nobody else listens there meanwhile.
        return f"postgresql://postgres@127.0.0.1:{self._closed.enter_context(closed_port())}/nothing"

    async def _admin(self, *statements: str) -> None:
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    async def block_writes(self) -> None:
        # New sessions start read-only; existing ones are cut so the pools must reconnect.
        await self._admin(
            f'ALTER DATABASE "{self.database}" SET default_transaction_read_only = on',
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            f" WHERE datname = '{self.database}' AND pid <> pg_backend_pid()",
        )

    async def unblock_writes(self) -> None:
        await self._admin(f'ALTER DATABASE "{self.database}" RESET default_transaction_read_only')

    async def aclose(self) -> None:
        self._closed.close()
        await super().aclose()
        if self.database:
            await pg.drop_database(self.admin_dsn, self.database)


def record(action_id: str, **fields: Any) -> ActionRecord:
    """A PLANNED record with plausible defaults; `fields` override any of them."""
    base: dict[str, Any] = {
        "action_id": action_id,
        "tenant": "acme",
        "run_id": "run-1",
        "step_id": f"step-{action_id}",
        "tool": "payments.charge",
        "scope": "acme/run-1",
        "payload_type": "effectgate.tools.v1.ChargeRequest",
        "payload": b"\x08\x01\x12\x03EUR",
        "fingerprint": f"fp-{action_id}",
        "state": State.PLANNED,
        "created_at": 1_000.0,
        "updated_at": 1_000.0,
    }
    base.update(fields)
    return ActionRecord(**base)


def rich_record(action_id: str) -> ActionRecord:
    """A record using every field, with awkward values (bytes, unicode, nesting, long floats)."""
    receipt = Receipt(
        external_id="ch_3Q\u00e9",
        provider_request_id="req_1",
        result={"amount": 1999, "currency": "eur", "meta": {"a": [1, 2.5, None, True]}, "s": "\u2603"},
        at=1_700_000_000.123456,
    )
    observation = Observation(
        Outcome.CONFIRMED,
        detail="read back by id",
        evidence={"status": "succeeded", "list": ["x", {"y": 0.1}]},
        at=1_700_000_001.987654321,
        receipt=receipt,
    )
    return record(
        action_id,
        payload=bytes(range(256)),
        state=State.CONFIRMED,
        created_at=1_700_000_000.000001,
        updated_at=1_700_000_002.5,
        parent_run_id="parent",
        agent="agent-\u4e00",
        tool_call_id="call_9",
        attempts=3,
        generation=2,
        receipt=receipt,
        observation=observation,
        reason="confirmed by read-back",
        next_step=NextStep.OPERATOR,
        next_check_at=1_700_000_100.25,
        dispatched_at=1_700_000_000.5,
        checks=4,
        bypass_granted=True,
        notes=("first", 'second: \u00fc"quoted"', ""),
    )
