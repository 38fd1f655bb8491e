"""`effectgate audit verify`: walks every tenant's hash chain (store/trail/chain.py) from its anchor to
its head and names the first row where it does not hold.

A row holds when it sits at the next position, links to the previous row's hash, and its own
hash is the one its fields give. So an edited row is named by its hash; a removed row by the
row after the gap (its position, and its link to a row that is no longer there); rows removed
from the end by the head, which was advanced past them; a fork (two rows at one position) by the
second. Rows written before the chain began (n = 0) are counted, not checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from effectgate.gateway.model import ChainBreak, ChainEnds, TrailEvent
from effectgate.gateway.store.base import Store
from effectgate.gateway.store.trail.chain import row_hash

BATCH = 1000


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
    ends = await store.chain_ends()
    unchained = await store.unchained_events()
    rows = 0
    for end in ends:
        walked, broken = await _walk(store, end, since, batch)
        rows += walked
        if broken is not None:
            return Verdict(len(ends), rows, unchained, broken)
    return Verdict(len(ends), rows, unchained)


async def _walk(store: Store, end: ChainEnds, since: float, batch: int) -> tuple[int, ChainBreak | None]:
    n, prev = end.anchor_n + 1, end.anchor_hash
    if since:
        first = await store.chain_first_since(end.tenant, since)
        if first is None:
            return 0, None
        n, prev = first.n, first.prev_hash
    walked, last_seq = 0, 0
    while True:
        found = await store.chain_rows(end.tenant, n - 1, batch)
        for row in found:
            broken = check(row, n, prev)
            if broken is not None:
                return walked, broken
            n, prev, last_seq = n + 1, row.hash, row.event.seq
            walked += 1
        if len(found) < batch:
            break
    if n - 1 != end.head_n or prev != end.head_hash:
        problem = f"the chain ends at position {n - 1} but its head is at {end.head_n}"
        return walked, ChainBreak(end.tenant, last_seq, n - 1, problem, end.head_hash, prev)
    return walked, None
