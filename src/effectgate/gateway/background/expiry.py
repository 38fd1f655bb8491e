"""Approval expiry: a background job that rejects actions nobody approved within their tool's
`approval_ttl` ("approval expired after 10m", read by the waiting agent as the reason).

It goes through the protocol's verbs (`Decisions.expire_due`: lease, the `expire` transition,
release in one write, with the event in the action's story), on the protocol's clock (the
store's, shared by every replica); concurrent replicas never expire one action twice (the lease),
and an approval that wins the race leaves nothing to expire.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

from effectgate.gateway.background.runner import Job
from effectgate.gateway.core import Operations
from effectgate.gateway.model import GatewayUnavailable

log = logging.getLogger(__name__)


def expiry_job(operations: Operations, ttls: Mapping[str, float | None], interval: float) -> Job | None:
    """A pass every `interval` seconds over the tools that have an approval_ttl (None: none has)."""
    due = {tool: ttl for tool, ttl in ttls.items() if ttl is not None}
    for tool, ttl in due.items():
        if not (ttl > 0 and math.isfinite(ttl)):
            raise ValueError(f"approval_ttl of {tool!r} must be a positive number of seconds")
    if not due:
        return None

    async def expire() -> None:
        expired = await operations.decisions.expire_due(due)
        if expired:
            log.info("expired %d actions awaiting approval", expired)

    return Job("approval-expiry", expire, interval, on_error=_failed)


def _failed(exc: Exception) -> None:
    if isinstance(exc, GatewayUnavailable):
        log.warning("approval expiry skipped: %s", exc)
    else:
        log.error("approval expiry failed", exc_info=exc)
