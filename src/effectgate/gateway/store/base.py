"""The store seam: a few atomic primitives that the effect protocol builds on.

Dedup rests on the primary key (insert-if-absent), not on isolation levels. Every write after
the insert is conditional on the lease `fence`, so a worker that lost its lease (paused, partitioned,
presumed dead) can never record a dispatch or a result. Backends implement the primitives below
and pass the store conformance suite (tests/store_conformance.py).
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from effectgate.gateway.model import (
    ActionEvent,
    ActionRecord,
    ChainEnds,
    EventPage,
    EventQuery,
    LimitGrant,
    ListQuery,
    Page,
    Reservation,
    Ruling,
    TrailEvent,
)
from effectgate.gateway.store.evidence import ProviderLog
from effectgate.gateway.store.trail.outbox import NotifyOutbox
from effectgate.gateway.store.trail.stored import StoredRow

# One counter row of a tool's limits: (currency, bucket, effects, spent).
Usage = tuple[str, str, int, int]


class Store(ProviderLog, NotifyOutbox, ABC):
    """Durable home of action records. All times are Unix seconds (float). What providers said on
    their own (webhook events, read lags) is kept through the `ProviderLog` port (evidence.py)."""

    # False (`[store] migrate = "never"`): `open` applies no migration and raises `SchemaBehind`
    # when one is missing; `effectgate migrate` applies them (docs/production.md).
    migrate_on_open: bool = True
    # The file names of the migrations the last `open` applied.
    applied: tuple[str, ...] = ()

    @classmethod
    def from_url(cls, url: str) -> Store:
        """Builds (does not open) the store for `url`: what a backend found by its URL scheme
        (the `effectgate.stores` entry points, see registry.py) implements."""
        raise NotImplementedError(f"{cls.__name__} is not built from a URL")

    @abstractmethod
    async def open(self) -> None:
        """Connects and applies the missing schema migrations (safe to call from several
        replicas; nothing is written when none is missing), or with `migrate_on_open` False
        raises `SchemaBehind` when one is missing."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def insert_if_absent(
        self, record: ActionRecord, event: ActionEvent | None = None
    ) -> tuple[ActionRecord, bool]:
        """Inserts `record` unless its action_id exists. Returns (stored record, inserted).
        `event`: the entry of the action's story, written in the same transaction (only if inserted)."""

    @abstractmethod
    async def get(self, action_id: str) -> ActionRecord | None: ...

    @abstractmethod
    async def acquire_lease(self, action_id: str, owner: str, now: float, ttl: float) -> ActionRecord | None:
        """Takes the lease if nobody holds a live one: sets the owner, the expiry, and fence+1.
        Returns the leased record, or None when the action is absent or leased by someone."""

    @abstractmethod
    async def update(self, record: ActionRecord, event: ActionEvent | None = None) -> bool:
        """Writes `record` if the stored fence still equals `record.fence` (the fence grows at
        every lease acquisition, so an equal fence means the writer still holds the lease it
        acquired). Returns False when the lease was lost: nothing is written. `event`: the entry
        of the action's story, written in the same transaction (nothing when the fence refuses)."""

    @abstractmethod
    async def history(self, action_id: str) -> list[ActionEvent]:
        """The action's story, oldest first (each event with its `seq`)."""

    @abstractmethod
    async def awaiting(self, tool: str, created_before: float, limit: int) -> list[ActionRecord]:
        """Up to `limit` AWAITING_APPROVAL actions of `tool` created before `created_before`,
        oldest first (the approval expiry's work)."""

    @abstractmethod
    async def changes(self, query: ListQuery) -> list[ActionRecord]:
        """Actions of one tenant in (updated_at, action_id) order after `query.after` (a cursor
        made by `encode_cursor(updated_at, action_id)`), filtered like `list`; at most
        `query.page_size` (clamped to 1..1000). The watch polls it."""

    @abstractmethod
    async def claim_due(self, owner: str, now: float, ttl: float, limit: int) -> list[ActionRecord]:
        """Leases up to `limit` actions that need the reconciler (`domain.DUE`): RECOVERABLE ones
        (PLANNED, DISPATCHED) whose lease is free, and RECHECKED ones (UNKNOWN) whose lease is free
        and whose next_check_at is due. Concurrent claimers get disjoint sets."""

    @abstractmethod
    async def list(self, query: ListQuery) -> Page:
        """Actions of one tenant, oldest first (created_at, then action_id), filtered, paged by an
        opaque cursor. A page_size of 0 or less means 50; more than 1000 is clamped to 1000."""

    @abstractmethod
    async def purge(self, tool: str, before: float, limit: int = 1000) -> int:
        """Deletes up to `limit` terminal actions (`domain.TERMINAL`) of `tool` created before
        `before`, with their stories."""

    @abstractmethod
    async def probe(self, now: float) -> None:
        """The readiness probe: durably writes a heartbeat (`now`) into a table of its own,
        touching no action. Raises StoreUnavailable when the store cannot be written."""

    # -- the audit trail (store/trail/): a store that keeps it overrides all five -----

    async def events(self, query: EventQuery) -> EventPage:
        """One tenant's events in chain order after `query.after` (a token of a previous page),
        filtered; raises ValueError on a token it did not make."""
        raise NotImplementedError(f"{type(self).__name__} keeps no audit trail")

    async def chain_ends(self) -> builtins.list[ChainEnds]:
        """Every tenant's chain head and anchor."""
        raise NotImplementedError(f"{type(self).__name__} keeps no audit trail")

    async def chain_rows(self, tenant: str, after_n: int, limit: int) -> builtins.list[TrailEvent]:
        """Up to `limit` chained rows of `tenant` after position `after_n`, in chain order."""
        raise NotImplementedError(f"{type(self).__name__} keeps no audit trail")

    async def chain_first_since(self, tenant: str, since: float) -> TrailEvent | None:
        """The first chained row of `tenant` written at or after `since`."""
        raise NotImplementedError(f"{type(self).__name__} keeps no audit trail")

    async def unchained_events(self) -> int:
        """How many event rows were written before the chain began (migration 0009)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no audit trail")

    # `audit verify` reads the rows as stored (store/trail/stored.py), decoding nothing by trust.

    async def stored_chain_ends(self) -> builtins.list[tuple[tuple[str, ...], tuple[Any, ...]]]:
        """Every tenant's head and anchor as stored: (classes, (tenant, n, hash, anchor_n, anchor_hash))."""
        raise NotImplementedError(f"{type(self).__name__} keeps no audit trail")

    async def stored_chain_rows(self, tenant: str, after_n: int, limit: int) -> builtins.list[StoredRow]:
        """`chain_rows`, as stored."""
        raise NotImplementedError(f"{type(self).__name__} keeps no audit trail")

    async def stored_first_since(self, tenant: str, since: float) -> StoredRow | None:
        """`chain_first_since`, as stored."""
        raise NotImplementedError(f"{type(self).__name__} keeps no audit trail")

    async def stored_linked_to(self, prev_hash: str) -> StoredRow | None:
        """The event row (of any tenant, at any position) whose prev_hash is `prev_hash`."""
        raise NotImplementedError(f"{type(self).__name__} keeps no audit trail")

    # -- limits (docs/limits.md): a store that keeps them overrides all five ----------------------

    async def claim(
        self,
        record: ActionRecord,
        reservation: Reservation,
        event: ActionEvent | None = None,
        ruling: Ruling | None = None,
    ) -> tuple[ActionRecord, bool]:
        """`insert_if_absent` (with its `event`) and, when it inserts, the reservation, in one
        transaction: all or nothing. Raises `LimitExceeded` (nothing inserted) when the reservation
        does not fit. With a `ruling`, its rule is decided in that transaction on the counters it
        locked, and when it holds, `ruling.held` is what is stored and answered."""
        raise NotImplementedError(f"{type(self).__name__} does not keep limits")

    async def update_accounted(
        self,
        record: ActionRecord,
        *,
        hold: Reservation | None = None,
        release: bool = False,
        event: ActionEvent | None = None,
    ) -> bool:
        """`update` (with its `event`), and in the same transaction: `release` gives back what the record's generation
        holds; `hold` makes it hold a reservation again (raises `LimitExceeded`, nothing written,
        when one released before no longer fits)."""
        raise NotImplementedError(f"{type(self).__name__} does not keep limits")

    async def release_reservation(self, action_id: str, generation: int) -> bool:
        """Gives back what the generation holds (a denial, an expiry); False when it held nothing."""
        raise NotImplementedError(f"{type(self).__name__} does not keep limits")

    async def usage(self, tenant: str, tool: str) -> builtins.list[Usage]:
        """The tool's counter rows for one tenant (windows `w:<start>`, runs `r:<run id>`)."""
        raise NotImplementedError(f"{type(self).__name__} does not keep limits")

    async def grant_limit(self, grant: LimitGrant) -> None:
        """Records an operator's grant: the next reservation of `grant.action_id` (in its tenant,
        before `expires_at`) that a limit refuses takes it, once, in the reservation's transaction,
        and is counted without the check (`claim`, `update_accounted(hold=...)`). Replaces an
        earlier grant of the same id, used or not."""
        raise NotImplementedError(f"{type(self).__name__} does not keep limits")

    async def insert_many(self, records: Sequence[ActionRecord]) -> None:
        """Bulk load (benchmarks, imports): inserts every record whose id is absent."""
        for record in records:
            await self.insert_if_absent(record)

    async def clock(self) -> float | None:
        """The store's own time now (Unix seconds), read in one round trip; None when the store
        has no clock of its own (SQLite: its clock is this host's). `store.clock.StoreClock`
        anchors the gateway's clock on it, so that replicas on one store share one clock."""
        return None

    def redacted_url(self) -> str:
        """The store's URL with any password masked: safe to log and to put in errors."""
        return ""

    def describe(self) -> str:
        """What this store is, safe to log: never a password."""
        return self.redacted_url() or type(self).__name__
