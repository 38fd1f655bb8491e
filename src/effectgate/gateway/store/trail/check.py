"""`effectgate audit verify`: walks every tenant's hash chain (store/trail/chain.py) from its anchor to
its head and names the first row where it does not hold.

It reads the rows as stored (stored.py) and trusts no decode: a row whose columns are not what
the trail keeps there (a state that is not a state, a detail that is not JSON, text that is not
UTF-8, a time or a position that is not a number) is the break, named with what was expected and
what was found. A row holds when it decodes, sits at the next position, links to the previous
row's hash, and its own hash is the one its fields give. So an edited row is named by its hash; a
removed row by the row after the gap (its position, and its link to a row that is no longer
there); a row moved out of its place (its position or tenant edited) by itself, found by its link;
rows removed from the end by the head, which was advanced past them; a fork (two rows at one
position) by the second. Rows written before the chain began (n = 0) are counted, not checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from effectgate.gateway.model import ChainBreak, ChainEnds, TrailEvent
from effectgate.gateway.store.base import Store
from effectgate.gateway.store.trail.chain import row_hash
from effectgate.gateway.store.trail.stored import StoredRow, shown

BATCH = 1000
# The head's and the anchor's columns as stored_chain_ends answers them: (column, class, whose).
_ENDS = (
    ("tenant", "text", "head"), ("n", "integer", "head"), ("hash", "text", "head"),
    ("n", "integer", "anchor"), ("hash", "text", "anchor"),
)  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    tenants: int
    rows: int
    unchained: int
    broken: ChainBreak | None = None


def check(row: TrailEvent, n: int, prev_hash: str) -> ChainBreak | None:
    """The row's break when it should be position `n` after a row hashed `prev_hash`."""
    if row.n != n:
        problem = f"position {n} is missing" if row.n > n else f"a second row at position {row.n}"
        return ChainBreak(row.tenant, row.event.seq, row.n, problem, str(n), str(row.n))
    if row.prev_hash != prev_hash:
        return ChainBreak(row.tenant, row.event.seq, row.n, "prev_hash does not link", prev_hash, row.prev_hash)
    recomputed = row_hash(row)
    if recomputed != row.hash:
        return ChainBreak(row.tenant, row.event.seq, row.n, "hash does not match the row", recomputed, row.hash)
    return None


async def verify(store: Store, since: float = 0.0, batch: int = BATCH) -> Verdict:
    """Every tenant's chain (from its first row at or after `since`, trusting that row's link,
    when `since` is given); stops at the first break."""
    ends, broken = await _ends(store)
    unchained = await store.unchained_events()
    if broken is not None:
        return Verdict(len(ends), 0, unchained, broken)
    rows = 0
    for end in ends:
        walked, broken = await _walk(store, end, since, batch)
        rows += walked
        if broken is not None:
            return Verdict(len(ends), rows, unchained, broken)
    return Verdict(len(ends), rows, unchained)


async def _ends(store: Store) -> tuple[list[ChainEnds], ChainBreak | None]:
    """The tenants' heads and anchors, or the first that is not a position and a hash."""
    ends: list[ChainEnds] = []
    for classes, values in await store.stored_chain_ends():
        tenant = values[0] if isinstance(values[0], str) else shown(classes[0], values[0])
        for (column, want, whose), cls, value in zip(_ENDS, classes, values, strict=True):
            if cls != want or not isinstance(value, str if want == "text" else int):
                problem = f"the chain's {whose} {column} is not {'text' if want == 'text' else 'a position'}"
                return ends, ChainBreak(tenant, 0, 0, problem, want, shown(cls, value))
        ends.append(ChainEnds(*values))
    return ends, None


async def _walk(store: Store, end: ChainEnds, since: float, batch: int) -> tuple[int, ChainBreak | None]:
    n, prev = end.anchor_n + 1, end.anchor_hash
    if since:
        first = await store.stored_first_since(end.tenant, since)
        if first is None:
            return 0, None
        misfit = _misfit(end.tenant, first, n)
        if misfit is not None:
            return 0, misfit
        n, prev = first.get("n"), first.get("prev_hash")
    walked, last_seq, past_head = 0, 0, 0
    while True:
        found = await store.stored_chain_rows(end.tenant, n - 1, batch)
        for stored in found:
            broken = await _row(store, end.tenant, stored, n, prev)
            if broken is not None:
                return walked, broken
            if n == end.head_n + 1:
                past_head = stored.seq
            n, prev, last_seq = n + 1, stored.get("hash"), stored.seq
            walked += 1
        if len(found) < batch:
            break
    return walked, await _at_the_head(store, end, n - 1, prev, last_seq, past_head)


async def _row(store: Store, tenant: str, stored: StoredRow, n: int, prev: str) -> ChainBreak | None:
    """The break of a stored row found where position `n` should be, after a row hashed `prev`."""
    misfit = _misfit(tenant, stored, n)
    if misfit is not None:
        return misfit
    row = stored.event()
    if row.n > n:  # position n is not here: the row that held it, when it moved, else the gap
        moved = await _moved(store, tenant, n, prev)
        if moved is not None:
            return moved
    return check(row, n, prev)


def _misfit(tenant: str, stored: StoredRow, n: int) -> ChainBreak | None:
    misfit = stored.misfit()
    if misfit is None:
        return None
    return ChainBreak(tenant, stored.seq, n, misfit.problem, misfit.expected, misfit.found)


async def _moved(store: Store, tenant: str, n: int, prev: str) -> ChainBreak | None:
    """Position `n` of `tenant`'s chain is not where the walk looks: the row that links to the one
    before it (`prev`), when it is stored elsewhere (its position or its tenant edited), named."""
    if not prev:  # every chain's first row links to "": no row to tell apart
        return None
    stored = await store.stored_linked_to(prev)
    if stored is None:
        return None
    misfit = _misfit(tenant, stored, n)
    if misfit is not None:
        return misfit
    row = stored.event()
    if row.tenant != tenant:
        problem = f"the row at position {n} is stored as another tenant's"
        return ChainBreak(tenant, row.event.seq, n, problem, tenant, row.tenant)
    if row.n != n:
        problem = f"the row at position {n} is stored at position {row.n}"
        return ChainBreak(tenant, row.event.seq, n, problem, str(n), str(row.n))
    return None


async def _at_the_head(
    store: Store, end: ChainEnds, last_n: int, last_hash: str, last_seq: int, past_head: int
) -> ChainBreak | None:
    """The break between the walk's last row (position `last_n`, hashed `last_hash`) and the head."""
    if last_n == end.head_n and last_hash == end.head_hash:
        return None
    if last_n < end.head_n:
        moved = await _moved(store, end.tenant, last_n + 1, last_hash)
        if moved is not None:
            return moved
        problem = f"the chain ends at position {last_n} but its head is at {end.head_n}"
        return ChainBreak(end.tenant, last_seq, last_n, problem, end.head_hash, last_hash)
    if last_n > end.head_n:
        problem = f"the chain goes on past its head at position {end.head_n} (to {last_n})"
        return ChainBreak(end.tenant, past_head, end.head_n + 1, problem, str(end.head_n), str(last_n))
    problem = f"the last row (position {last_n}) is not the row its head recorded"
    return ChainBreak(end.tenant, last_seq, last_n, problem, end.head_hash, last_hash)
