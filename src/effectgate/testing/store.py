"""The Store ABC in memory: the same fence, lease and due-work rules as the SQL backends.

Rows are kept as JSON documents (the stores' own versioned codec), so what a test reads back went
through the same round trip as in a real store. Several `MemoryStore`s may share one
`MemoryDatabase` (replicas on one store). Faults: `db.down` makes every call fail,
`db.read_only` every write, and `db.fail_writes_after(n)` lets n more writes through first —
all with `StoreUnavailable`, as a real backend that cannot persist.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from effectgate.gateway.model import (
    DUE,
    MAX_COUNT,
    RECOVERABLE,
    TERMINAL,
    ActionEvent,
    ActionRecord,
    LimitExceeded,
    LimitGrant,
    ListQuery,
    Page,
    Reservation,
    Ruling,
    State,
)
from effectgate.gateway.store import Store, StoreUnavailable, Usage, beyond, codec, decode_cursor, denial, rows


@dataclass
class MemoryDatabase:
    """The rows (action id -> JSON document) and the faults, shared by the stores on it."""

    rows: dict[str, str] = field(default_factory=dict)
    down: bool = False
    read_only: bool = False
    # Writes still allowed before the store starts refusing them (None: no limit).
    writes_left: int | None = None
    # Calls by operation name, across every store on this database.
    calls: Counter[str] = field(default_factory=Counter)
    # The readiness probe's last heartbeat (`Store.probe`), kept apart from the actions.
    probed_at: float | None = None
    # Every action's story, in the order it was written (`ActionEvent.seq` is the index + 1).
    events: list[ActionEvent] = field(default_factory=list)
    # Limits: (tenant, tool, currency, bucket) -> [effects, spent]; (action id, generation) ->
    # (the reservation, held).
    counters: dict[tuple[str, str, str, str], list[int]] = field(default_factory=dict)
    reservations: dict[tuple[str, int], tuple[Reservation, bool]] = field(default_factory=dict)
    # Limit grants by action id and tenant (each tenant's its own), and whether each was used.
    grants: dict[tuple[str, str], tuple[LimitGrant, bool]] = field(default_factory=dict)
    # Provider evidence (`ProviderLog`): webhook events applied, and read lags by lag key.
    provider_events: dict[tuple[str, str], str] = field(default_factory=dict)
    lags: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def fail_writes_after(self, n: int) -> None:
        self.writes_left = n

    def heal(self) -> None:
        self.down = self.read_only = False
        self.writes_left = None

    @property
    def writes(self) -> int:
        return sum(n for op, n in self.calls.items() if op not in ("get", "list", "history", "awaiting", "changes"))

    def record(self, action_id: str) -> ActionRecord | None:
        text = self.rows.get(action_id)
        return None if text is None else codec.decode(text)


class MemoryStore(Store):
    """A `Store` on a `MemoryDatabase` (a new one by default)."""

    def __init__(self, db: MemoryDatabase | None = None) -> None:
        self.db = db if db is not None else MemoryDatabase()
        self._open = False

    async def open(self) -> None:
        if self.db.down:
            raise StoreUnavailable("memory store is down")
        self._open = True

    async def close(self) -> None:
        self._open = False

    def _enter(self, op: str, *, write: bool) -> None:
        self.db.calls[op] += 1
        if not self._open or self.db.down:
            raise StoreUnavailable(f"memory store cannot {op}: down")
        if write:
            if self.db.read_only:
                raise StoreUnavailable(f"memory store cannot {op}: read-only")
            if self.db.writes_left is not None:
                if self.db.writes_left <= 0:
                    raise StoreUnavailable(f"memory store cannot {op}: writes fail")
                self.db.writes_left -= 1

    def _load(self, action_id: str) -> ActionRecord | None:
        return self.db.record(action_id)

    def _save(self, record: ActionRecord, event: ActionEvent | None = None) -> None:
        self.db.rows[record.action_id] = codec.encode(record)
        if event is not None:
            self.db.events.append(dataclasses.replace(event, seq=len(self.db.events) + 1))

    async def insert_if_absent(
        self, record: ActionRecord, event: ActionEvent | None = None
    ) -> tuple[ActionRecord, bool]:
        self._enter("insert_if_absent", write=True)
        existing = self._load(record.action_id)
        if existing is not None:
            return existing, False
        self._save(record, event)
        return record, True

    async def get(self, action_id: str) -> ActionRecord | None:
        self._enter("get", write=False)
        return self._load(action_id)

    async def acquire_lease(self, action_id: str, owner: str, now: float, ttl: float) -> ActionRecord | None:
        self._enter("acquire_lease", write=True)
        current = self._load(action_id)
        if current is None or (current.lease_owner and current.lease_expires_at > now):
            return None
        leased = current.evolve(fence=current.fence + 1, lease_owner=owner, lease_expires_at=now + ttl)
        self._save(leased)
        return leased

    async def update(self, record: ActionRecord, event: ActionEvent | None = None) -> bool:
        self._enter("update", write=True)
        current = self._load(record.action_id)
        if current is None or current.fence != record.fence:
            return False
        self._save(record, event)
        return True

    async def history(self, action_id: str) -> list[ActionEvent]:
        self._enter("history", write=False)
        return [e for e in self.db.events if e.action_id == action_id]

    async def awaiting(self, tool: str, created_before: float, limit: int) -> list[ActionRecord]:
        self._enter("awaiting", write=False)
        found = [
            r
            for r in map(codec.decode, self.db.rows.values())
            if r.state is State.AWAITING_APPROVAL and r.tool == tool and r.created_at < created_before
        ]
        return sorted(found, key=lambda r: (r.created_at, r.action_id))[: max(limit, 0)]

    async def changes(self, query: ListQuery) -> list[ActionRecord]:
        self._enter("changes", write=False)
        return self._matching(query, _by_change)[: rows.page_size(query)]

    async def claim_due(self, owner: str, now: float, ttl: float, limit: int) -> list[ActionRecord]:
        self._enter("claim_due", write=True)
        due = [
            r
            for r in map(codec.decode, self.db.rows.values())
            if r.state in DUE
            and r.lease_expires_at <= now
            and (r.state in RECOVERABLE or (r.next_check_at is not None and r.next_check_at <= now))
        ]
        due.sort(key=lambda r: r.updated_at)
        claimed = []
        for current in due[: max(limit, 0)]:
            leased = current.evolve(fence=current.fence + 1, lease_owner=owner, lease_expires_at=now + ttl)
            self._save(leased)
            claimed.append(leased)
        return claimed

    async def list(self, query: ListQuery) -> Page:
        self._enter("list", write=False)
        return rows.page(self._matching(query, _by_creation), rows.page_size(query))

    def _matching(
        self, query: ListQuery, order: Callable[[ActionRecord], tuple[float, str]]
    ) -> builtins.list[ActionRecord]:
        """The tenant's actions that pass the query's filters, after its cursor, in `order` (the
        key the cursor was made of: creation for `list`, the last change for `changes`)."""
        after = decode_cursor(query.after) if query.after else None
        return sorted(
            (
                r
                for r in map(codec.decode, self.db.rows.values())
                if r.tenant == query.tenant
                and (query.state is None or r.state is query.state)
                and (not query.run_id or r.run_id == query.run_id)
                and (not query.tool or r.tool == query.tool)
                and (after is None or order(r) > after)
            ),
            key=order,
        )

    async def purge(self, tool: str, before: float, limit: int = 1000) -> int:
        self._enter("purge", write=True)
        doomed = [
            r.action_id
            for r in map(codec.decode, self.db.rows.values())
            if r.tool == tool and r.created_at < before and r.state in TERMINAL
        ][:limit]
        for action_id in doomed:
            del self.db.rows[action_id]
        gone = set(doomed)
        self.db.events = [e for e in self.db.events if e.action_id not in gone]
        return len(doomed)

    # -- limits: the same rules as store/accounting.py, one step at a time (no await inside) ------

    async def claim(
        self,
        record: ActionRecord,
        reservation: Reservation,
        event: ActionEvent | None = None,
        ruling: Ruling | None = None,
    ) -> tuple[ActionRecord, bool]:
        self._enter("claim", write=True)
        existing = self._load(record.action_id)
        if existing is not None:
            return existing, False
        before = {k: (v[0], v[1]) for k, v in self.db.counters.items()}
        granted = self._reserve(record.action_id, record.generation, reservation, record.state)
        if ruling is not None:
            seen = {(c, b): before.get((reservation.tenant, reservation.tool, c, b), (0, 0)) for c, b in ruling.keys}
            if ruling.holds(seen):
                record, event = ruling.held, ruling.held_event
        self._save(record, event)
        if granted is not None:
            self.db.events.append(dataclasses.replace(granted, seq=len(self.db.events) + 1))
        return record, True

    async def update_accounted(
        self,
        record: ActionRecord,
        *,
        hold: Reservation | None = None,
        release: bool = False,
        event: ActionEvent | None = None,
    ) -> bool:
        self._enter("update", write=True)
        current = self._load(record.action_id)
        if current is None or current.fence != record.fence:
            return False
        key = (record.action_id, record.generation)
        granted = None
        if hold is not None and not self.db.reservations.get(key, (hold, False))[1]:
            had = key in self.db.reservations
            kept = self.db.reservations.pop(key, None)
            try:
                granted = self._reserve(*key, hold if had else dataclasses.replace(hold, forced=True), record.state)
            except LimitExceeded:
                if kept is not None:
                    self.db.reservations[key] = kept
                raise
        if release:
            self._release(*key)
        self._save(record, event)
        if granted is not None:
            self.db.events.append(dataclasses.replace(granted, seq=len(self.db.events) + 1))
        return True

    async def release_reservation(self, action_id: str, generation: int) -> bool:
        self._enter("release_reservation", write=True)
        return self._release(action_id, generation)

    async def usage(self, tenant: str, tool: str) -> builtins.list[Usage]:
        self._enter("usage", write=False)
        return sorted((c, b, e, s) for (t, n, c, b), (e, s) in self.db.counters.items() if (t, n) == (tenant, tool))

    async def grant_limit(self, grant: LimitGrant) -> None:
        self._enter("grant_limit", write=True)
        self.db.grants[(grant.action_id, grant.tenant)] = (grant, False)

    def _reserve(self, action_id: str, generation: int, r: Reservation, state: State) -> ActionEvent | None:
        """Checks, then adds; a bucket it does not fit takes the action's grant (if any). Answers
        the grant's entry in the story when one was taken."""
        r = r.ordered()
        entry = None
        for bucket in r.buckets:
            effects, spent = self.db.counters.get((r.tenant, r.tool, bucket.currency, bucket.key), [0, 0])
            if effects + 1 > MAX_COUNT or spent + bucket.amount > MAX_COUNT:  # not even a grant fits
                raise beyond(r, bucket, effects, spent)
            over = (bucket.max_effects is not None and effects + 1 > bucket.max_effects) or (
                bucket.max_spent is not None and spent + bucket.amount > bucket.max_spent
            )
            if over and not r.forced:
                refusal = denial(r, bucket, effects, spent)
                grant, used = self.db.grants.get((action_id, r.tenant), (None, True))
                if grant is None or used or grant.expires_at <= r.at:
                    raise refusal
                self.db.grants[(action_id, r.tenant)] = (grant, True)
                r = dataclasses.replace(r, forced=True)
                figures = {k: v for k, v in refusal.figures.items() if k != "action_id"}
                detail = {"reason": refusal.reason, "granted_at": grant.granted_at, "figures": figures}
                entry = ActionEvent(action_id, r.at, "limit_grant", state, grant.principal, grant.note, detail)
        for bucket in r.buckets:
            counter = self.db.counters.setdefault((r.tenant, r.tool, bucket.currency, bucket.key), [0, 0])
            counter[0] += 1
            counter[1] += bucket.amount
        self.db.reservations[(action_id, generation)] = (r, True)
        return entry

    def _release(self, action_id: str, generation: int) -> bool:
        found = self.db.reservations.get((action_id, generation))
        if found is None or not found[1]:
            return False
        r = found[0]
        for bucket in r.buckets:
            counter = self.db.counters[(r.tenant, r.tool, bucket.currency, bucket.key)]
            counter[0] -= 1
            counter[1] -= bucket.amount
        self.db.reservations[(action_id, generation)] = (r, False)
        return True

    async def probe(self, now: float) -> None:
        self._enter("probe", write=True)
        self.db.probed_at = now

    async def claim_provider_event(self, source: str, event_id: str, action_id: str, kind: str, at: float) -> bool:
        self._enter("claim_provider_event", write=True)
        if (source, event_id) in self.db.provider_events:
            return False
        self.db.provider_events[(source, event_id)] = action_id
        return True

    async def forget_provider_event(self, source: str, event_id: str) -> None:
        self._enter("forget_provider_event", write=True)
        self.db.provider_events.pop((source, event_id), None)

    async def record_read_lag(self, lag_key: str, at: float, lag: float) -> None:
        self._enter("record_read_lag", write=True)
        self.db.lags.setdefault(lag_key, []).append((at, lag))

    async def read_lags(self, lag_key: str, limit: int = 2000) -> builtins.list[float]:
        self._enter("read_lags", write=False)
        return [lag for _, lag in sorted(self.db.lags.get(lag_key, []))[-limit:]]


def _by_creation(record: ActionRecord) -> tuple[float, str]:
    return record.created_at, record.action_id


def _by_change(record: ActionRecord) -> tuple[float, str]:
    return record.updated_at, record.action_id
