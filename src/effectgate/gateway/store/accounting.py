"""Limits in SQL: reserve, release and re-hold, written once for both dialects as *scripts*.

A script is a generator that yields `(sql, params)` and is sent back each statement's rows; a
backend runs the whole script in one transaction (`SqlStore._transact`) and rolls it back when the
script raises. So the claim's insert and its reservation commit together or not at all.

Serialisation: a reservation adds to each of its counter rows with one conditional upsert,
`INSERT … ON CONFLICT DO UPDATE … WHERE effects + 1 <= cap AND spent + amount <= cap RETURNING`
(written as differences, so that no sum can overflow 64 bits: every counter stays within
`MAX_COUNT`, a forced one's too).
On PostgreSQL the upsert row-locks the counter until commit, so concurrent reservers of one
(tenant, tool, currency, bucket) queue on that row and each sees the previous one's sum (READ
COMMITTED re-evaluates the WHERE on the newest version): no advisory lock, no SERIALIZABLE retry
loop, and replicas serialise through the database. SQLite has one writer. Every transaction locks
the action row first, then its counters in key order, then its tenant's event-chain head
(trail/chain.py: the story is written last), so no two wait on each other in a cycle.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from effectgate.gateway.model import (
    MAX_COUNT,
    ActionEvent,
    Bucket,
    BudgetExceeded,
    LimitExceeded,
    LimitGrant,
    RateLimited,
    Reservation,
    State,
)
from effectgate.gateway.store.sql_primitives import Dialect, Script

# An uncapped bucket's cap in the conditional upsert, a forced one's included: no counter goes
# past MAX_COUNT (2^62), so no sum of the signed 64-bit columns can overflow.
UNCAPPED = MAX_COUNT


class AccountingStatements:
    def __init__(self, d: Dialect) -> None:
        key = "tenant = ? AND tool = ? AND currency = ? AND bucket = ?"
        # Parameters: tenant, tool, currency, bucket, spent; effects cap, spent cap.
        self.add = d.render(
            "INSERT INTO limit_counters (tenant, tool, currency, bucket, effects, spent) VALUES (?, ?, ?, ?, 1, ?)"
            " ON CONFLICT (tenant, tool, currency, bucket) DO UPDATE SET"
            " effects = limit_counters.effects + 1, spent = limit_counters.spent + excluded.spent"
            # As `effects + 1 <= cap AND spent + amount <= cap`, without a sum that could overflow.
            " WHERE limit_counters.effects < ? AND excluded.spent <= ? - limit_counters.spent"
            " RETURNING effects, spent"
        )
        # Parameters: spent, then the key.
        self.subtract = d.render(f"UPDATE limit_counters SET effects = effects - 1, spent = spent - ? WHERE {key}")
        self.counter = d.render(f"SELECT effects, spent FROM limit_counters WHERE {key}")
        self.reservation = d.render(
            "INSERT INTO reservations (action_id, generation, tenant, tool, currency, amount, buckets, held, forced,"
            " reserved_at) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?)"
        )
        self.held = d.render("SELECT held FROM reservations WHERE action_id = ? AND generation = ?")
        self.forget = d.render("DELETE FROM reservations WHERE action_id = ? AND generation = ?")
        self.release = d.render(
            "UPDATE reservations SET held = 0 WHERE action_id = ? AND generation = ? AND held = 1"
            " RETURNING tenant, tool, currency, amount, buckets"
        )
        # Parameters: tenant, tool, prefix, prefix. The window and run counters of one tool.
        self.usage = d.render(
            "SELECT currency, bucket, effects, spent FROM limit_counters WHERE tenant = ? AND tool = ?"
            " ORDER BY currency, bucket"
        )
        # Limit grants (migrations 0008, 0011). A new grant replaces a used or expired one of the
        # same id and tenant; another tenant's grant of the id is a row of its own (the
        # simulator's seed 68 found one tenant's operator taking over another's grant).
        self.grant = d.render(
            "INSERT INTO limit_grants (action_id, tenant, principal, note, granted_at, expires_at, used_at)"
            " VALUES (?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (action_id, tenant) DO UPDATE SET"
            " principal = excluded.principal, note = excluded.note, granted_at = excluded.granted_at,"
            " expires_at = excluded.expires_at, used_at = NULL"
        )
        # Parameters: now, action_id, tenant, now. Takes the grant once (the row lock serialises takers).
        self.take_grant = d.render(
            "UPDATE limit_grants SET used_at = ? WHERE action_id = ? AND tenant = ? AND used_at IS NULL"
            " AND expires_at > ? RETURNING principal, note, granted_at"
        )
        self.forced = d.render("UPDATE reservations SET forced = 1 WHERE action_id = ? AND generation = ?")


def reserve(
    q: AccountingStatements, action_id: str, generation: int, r: Reservation, state: State | None = None
) -> Script:
    """Adds the reservation to its buckets, or raises LimitExceeded (the caller rolls back). The
    reservation's own row goes first: a counter row stays locked from its upsert to the commit,
    so the upserts come last, in key order. A bucket it does not fit takes the action's limit
    grant, if an operator gave one: from there on the reservation is counted without the check,
    and the grant's use is an entry of the action's story (in the state `state`): the script
    answers those entries, which the caller writes last (the chain's head is the last lock a
    transaction takes, store/trail/chain.py)."""
    grants: list[ActionEvent] = []
    r = r.ordered()
    lines = "\n".join(f"{b.currency}\t{b.amount}\t{b.key}" for b in r.buckets)
    row = (action_id, generation, r.tenant, r.tool, r.currency, r.amount, lines, int(r.forced), r.at)
    yield q.reservation, row
    forced = r.forced
    for bucket in r.buckets:
        refusal = None if forced else _alone(r, bucket)
        if refusal is None:
            added = yield q.add, _add_params(r, bucket, forced)
            if added:
                continue
            found = yield q.counter, (r.tenant, r.tool, bucket.currency, bucket.key)
            effects, spent = (int(found[0][0]), int(found[0][1])) if found else (0, 0)
            if forced:  # not even a grant fits: the counter would pass MAX_COUNT
                raise beyond(r, bucket, effects, spent)
            refusal = denial(r, bucket, effects, spent)
        taken = yield q.take_grant, (r.at, action_id, r.tenant, r.at)
        if not taken:
            raise refusal
        forced = True
        yield q.forced, (action_id, generation)
        if state is not None:
            principal, note, granted_at = taken[0]
            figures = {k: v for k, v in refusal.figures.items() if k != "action_id"}
            detail = {"reason": refusal.reason, "granted_at": float(granted_at), "figures": figures}
            grants.append(ActionEvent(action_id, r.at, "limit_grant", state, str(principal), str(note), detail))
        added = yield q.add, _add_params(r, bucket, forced)
        if not added:  # the grant is not taken: this transaction is rolled back
            found = yield q.counter, (r.tenant, r.tool, bucket.currency, bucket.key)
            raise beyond(r, bucket, int(found[0][0]), int(found[0][1]))
    return grants


def counters_before(q: AccountingStatements, r: Reservation, wanted: Sequence[tuple[str, str]]) -> Script:
    """The counters `wanted` as they stood before `r` was added to them, read in the claim's
    transaction after `reserve`: the rows `r` adds to are locked by it until the commit, so a
    concurrent claim waits and then sees this one's sum (an approval rule reads these)."""
    mine = {(b.currency, b.key): b.amount for b in r.buckets}
    found: dict[tuple[str, str], tuple[int, int]] = {}
    for currency, bucket in wanted:
        rows = yield q.counter, (r.tenant, r.tool, currency, bucket)
        effects, spent = (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)
        if (currency, bucket) in mine:
            effects, spent = effects - 1, spent - mine[(currency, bucket)]
        found[(currency, bucket)] = (effects, spent)
    return found


def grant(q: AccountingStatements, g: LimitGrant) -> Script:
    yield q.grant, (g.action_id, g.tenant, g.principal, g.note, g.granted_at, g.expires_at)


def _add_params(r: Reservation, bucket: Bucket, forced: bool) -> tuple[object, ...]:
    effects_cap = UNCAPPED if forced or bucket.max_effects is None else bucket.max_effects
    spent_cap = UNCAPPED if forced or bucket.max_spent is None else bucket.max_spent
    return (r.tenant, r.tool, bucket.currency, bucket.key, bucket.amount, effects_cap, spent_cap)


def release(q: AccountingStatements, action_id: str, generation: int) -> Script:
    """Gives back what the generation holds (nothing when it holds nothing): idempotent."""
    found = yield q.release, (action_id, generation)
    if not found:
        return False
    tenant, tool, _, _, buckets = found[0]
    for line in sorted(str(buckets).split("\n")):  # the reservation's lock order
        if line:
            currency, amount, key = line.split("\t", 2)
            yield q.subtract, (int(amount), tenant, tool, currency, key)
    return True


def hold(
    q: AccountingStatements, action_id: str, generation: int, r: Reservation, state: State | None = None
) -> Script:
    """Makes sure the generation holds a reservation: a dispatch out of NOT_FOUND (released) takes
    one again in the current window, a generation with none (a bypass) takes its first. Answers
    the story entries of the grants it took (see `reserve`)."""
    found = yield q.held, (action_id, generation)
    if found and int(found[0][0]):
        return []
    if found:
        yield q.forget, (action_id, generation)
    # None held before (a bypass's new generation, an action claimed before limits were set): it
    # is counted as it stands; one released before is checked again, in today's window.
    grants: list[ActionEvent] = yield from reserve(
        q, action_id, generation, r if found else dataclasses.replace(r, forced=True), state
    )
    return grants


def _alone(r: Reservation, bucket: Bucket) -> LimitExceeded | None:
    """The first row of a bucket is inserted without the upsert's check: check it here."""
    if (bucket.max_effects is not None and bucket.max_effects < 1) or (
        bucket.max_spent is not None and bucket.max_spent < bucket.amount
    ):
        return denial(r, bucket, 0, 0)
    return None


def denial(r: Reservation, bucket: Bucket, effects: int, spent: int) -> LimitExceeded:
    """The error naming the first cap the reservation does not fit, with the figures left."""
    where = f"tool {r.tool!r} for tenant {r.tenant!r}"
    figures = {"tool": r.tool, "effects": str(effects)}
    resets = "" if bucket.resets_at is None else f"; the window resets at {_iso(bucket.resets_at)}"
    if bucket.resets_at is not None:
        figures["window_resets_at"] = _iso(bucket.resets_at)
    if bucket.max_effects is not None and effects + 1 > bucket.max_effects:
        figures |= {"limit": bucket.effects_limit, "max_effects": str(bucket.max_effects)}
        if bucket.resets_at is None:
            return BudgetExceeded(
                f"{where}: this run may make {bucket.max_effects} effects and made {effects}; nothing was sent",
                figures,
            )
        retry = max(bucket.resets_at - r.at, 1.0)
        return RateLimited(
            f"{where}: {effects} of {bucket.max_effects} effects used in this window{resets}; nothing was sent",
            figures,
            retry_after=retry,
        )
    cap = bucket.max_spent if bucket.max_spent is not None else 0
    left = max(cap - spent, 0)
    figures |= {
        "limit": bucket.spent_limit,
        "currency": r.currency,
        "budget": str(cap),
        "spent": str(spent),
        "left": str(left),
        "amount": str(r.amount),
    }
    scope = "this window" if bucket.resets_at is not None else "this run"
    return BudgetExceeded(
        f"{where}: an amount of {r.amount} {r.currency} does not fit the budget of {cap} {r.currency} for "
        f"{scope} ({spent} spent, {left} left){resets}; nothing was sent",
        figures,
    )


def beyond(r: Reservation, bucket: Bucket, effects: int, spent: int) -> LimitExceeded:
    """A reservation that would take a counter past MAX_COUNT, where no cap and no grant helps."""
    where = f"tool {r.tool!r} for tenant {r.tenant!r}"
    figures = {
        "tool": r.tool,
        "limit": "max_count",
        "max_count": str(MAX_COUNT),
        "currency": r.currency,
        "effects": str(effects),
        "spent": str(spent),
        "amount": str(r.amount),
    }
    return BudgetExceeded(
        f"{where}: an amount of {r.amount} {r.currency} would take the counter {bucket.key} past "
        f"{MAX_COUNT} ({spent} spent, {effects} effects), the most any counter holds; nothing was sent",
        figures,
    )


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
