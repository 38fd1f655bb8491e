"""Shared plumbing of the RPC handlers: error translation and deadlines."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from effectgate.gateway.errors import GatewayError
from effectgate.gateway.rpc.status import to_status

log = logging.getLogger("effectgate.rpc")
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]


def translate_errors(handler: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """Turns GatewayError into its gRPC status; anything else is an INTERNAL with no detail
    leaked (the traceback goes to the log only)."""

    @functools.wraps(handler)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
        try:
            return await handler(self, request, context)
        except GatewayError as error:
            status = to_status(error)
            await context.abort(status.code, status.details, trailing_metadata=status.trailing_metadata)
        except Exception:
            log.exception("unexpected error in %s", handler.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the gateway log")
        raise AssertionError("unreachable")  # pragma: no cover - abort raises

    return wrapper


def deadline_of(context: grpc.aio.ServicerContext[Any, Any], default: float) -> float:
    """Absolute deadline: the caller's, capped by the tool's own budget."""
    remaining = context.time_remaining()
    budget = default if remaining is None else min(remaining, default)
    return time.time() + max(budget, 0.0)
