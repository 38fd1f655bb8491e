"""The UNKNOWN backlog, read from the store for the metrics' gauges (a job of the background runner)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from effectgate.gateway.background.runner import Job
from effectgate.gateway.model import ListQuery, State
from effectgate.gateway.observability import BACKLOG, MAX_PAGES, PAGE, Backlog, store_error
from effectgate.gateway.store import Store

log = logging.getLogger("effectgate.metrics")


async def read_backlog(store: Store, tenants: Iterable[str]) -> Backlog:
    """Counts UNKNOWN actions through the store's `list` (oldest first, so page one has the
    oldest). Bounded: past MAX_PAGES pages per tenant the count is a lower bound."""
    count, oldest = 0, None
    for tenant in sorted(set(tenants)):
        after = ""
        for _ in range(MAX_PAGES):
            page = await store.list(ListQuery(tenant=tenant, state=State.UNKNOWN, page_size=PAGE, after=after))
            count += len(page.records)
            if page.records and (oldest is None or page.records[0].created_at < oldest):
                oldest = page.records[0].created_at
            after = page.next_token
            if not after:
                break
    return Backlog(count, oldest, read=True)


def backlog_job(store: Store, tenants: Iterable[str], interval: float) -> Job:
    """Refreshes BACKLOG at start and then every `interval` seconds."""
    names = list(tenants)

    async def refresh() -> None:
        fresh = await read_backlog(store, names)
        BACKLOG.count, BACKLOG.oldest_created_at, BACKLOG.read = fresh.count, fresh.oldest_created_at, True

    return Job("backlog", refresh, interval, on_error=_failed)


def _failed(exc: Exception) -> None:
    """The store may be down for a while: count it, keep the last reading."""
    store_error("backlog")
    log.warning("reading the UNKNOWN backlog failed: %s", type(exc).__name__)
