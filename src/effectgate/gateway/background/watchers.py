"""The backlogs, read from the store for the metrics' gauges (jobs of the background runner): the
UNKNOWN actions (what the gateway could not prove), the AWAITING_APPROVAL ones (what waits for
a person), and the limits' use and what is left."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from effectgate.gateway.background.runner import Job
from effectgate.gateway.core import LimitsDesk
from effectgate.gateway.model import ListQuery, State
from effectgate.gateway.observability import APPROVALS, BACKLOG, MAX_PAGES, PAGE, Backlog, limits_log, store_error
from effectgate.gateway.store import Store

log = logging.getLogger("effectgate.metrics")
WATCHED = ((State.UNKNOWN, BACKLOG), (State.AWAITING_APPROVAL, APPROVALS))


async def read_backlog(store: Store, tenants: Iterable[str], state: State = State.UNKNOWN) -> Backlog:
    """Counts the actions in `state` through the store's `list` (oldest first, so page one has the
    oldest). Bounded: past MAX_PAGES pages per tenant the count is a lower bound."""
    count, oldest = 0, None
    for tenant in sorted(set(tenants)):
        after = ""
        for _ in range(MAX_PAGES):
            page = await store.list(ListQuery(tenant=tenant, state=state, page_size=PAGE, after=after))
            count += len(page.records)
            if page.records and (oldest is None or page.records[0].created_at < oldest):
                oldest = page.records[0].created_at
            after = page.next_token
            if not after:
                break
    return Backlog(count, oldest, read=True)


def backlog_job(store: Store, tenants: Iterable[str], interval: float) -> Job:
    """Refreshes BACKLOG and APPROVALS at start and then every `interval` seconds."""
    names = list(tenants)

    async def refresh() -> None:
        for state, gauge in WATCHED:
            fresh = await read_backlog(store, names, state)
            gauge.count, gauge.oldest_created_at, gauge.read = fresh.count, fresh.oldest_created_at, True

    return Job("backlog", refresh, interval, on_error=_failed)


def _failed(exc: Exception) -> None:
    """The store may be down for a while: count it, keep the last reading."""
    store_error("backlog")
    log.warning("reading the backlogs failed: %s", type(exc).__name__)


def limits_job(desk: LimitsDesk, tenants: Iterable[str], interval: float) -> Job | None:
    """Refreshes the gauges of each window cap's use and what is left, per tenant (from the
    config's principals) and counted tool, at start and then every `interval` seconds; None when
    no tool is counted."""
    names = sorted(set(tenants))
    if not desk.counted_tools():
        return None

    async def refresh() -> None:
        readings: dict[tuple[str, str, str, str], tuple[int, int]] = {}
        for tenant in names:
            for usage in await desk.usage(tenant):
                for use in usage.limits:
                    readings[(tenant, usage.tool, use.limit, use.currency)] = (use.used, use.left)
        limits_log.usage_read(readings)

    return Job("limits", refresh, interval, on_error=_limits_failed)


def _limits_failed(exc: Exception) -> None:
    store_error("limits")
    log.warning("reading the limits' use failed: %s", type(exc).__name__)
