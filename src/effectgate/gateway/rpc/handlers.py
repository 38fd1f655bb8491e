"""Shared plumbing of the RPC handlers: deadlines. (Auth and error translation are interceptors.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc


def deadline_of(context: grpc.aio.ServicerContext[Any, Any], default: float, clock: Callable[[], float]) -> float:
    """Absolute deadline on `clock` (the protocol's): the caller's, capped by the tool's own budget."""
    remaining = context.time_remaining()
    budget = default if remaining is None else min(remaining, default)
    return clock() + max(budget, 0.0)
