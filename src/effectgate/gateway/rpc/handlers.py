"""Shared plumbing of the RPC handlers: deadlines. (Auth and error translation are interceptors.)"""

from __future__ import annotations

from typing import Any

import grpc


def deadline_of(context: grpc.aio.ServicerContext[Any, Any], default: float, now: float) -> float:
    """Absolute deadline on the protocol's clock (`now`: that clock's time, the store's on
    PostgreSQL): the caller's, capped by the tool's own budget."""
    remaining = context.time_remaining()
    budget = default if remaining is None else min(remaining, default)
    return now + max(budget, 0.0)
