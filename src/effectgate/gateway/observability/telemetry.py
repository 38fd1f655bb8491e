"""Spans outside a client's call, through the OpenTelemetry API only (no-ops until
`telemetry_sdk.setup` installs an SDK):

- `reconcile_span`: a root span per reconciler re-check, linked to the action's first trace;
- `annotate_current`: an operator's act puts the action's ids and state on the RPC's span.

The spans of a call (the RPC's, the Execute's, the provider calls') are `calls`', the one module
an Execute enters; the words all spans share (the action's attributes, its origin link) are
`action_spans`'.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace

from effectgate.gateway.model import ActionRecord, State
from effectgate.gateway.observability.action_spans import action_attributes, describe, origin_link, tracer

T = TypeVar("T")


async def reconcile_span(record: ActionRecord, work: Awaitable[T]) -> T:
    """Runs a reconciler drive under a root span `effectgate.reconcile` linked to the trace that
    created the action (a re-check is its own trace, one hop from the action's story)."""
    link = origin_link(record)
    reason = {State.UNKNOWN: "recheck", State.DISPATCHED: "abandoned"}.get(record.state, "planned")
    with tracer.start_as_current_span(
        "effectgate.reconcile",
        context=otel_context.Context(),
        attributes={**action_attributes(record), "effectgate.reason": reason},
        links=[link] if link is not None else None,
        record_exception=False,
    ):
        return await work


def annotate_current(record: ActionRecord) -> None:
    """Puts the action's ids and state on the current span (an RPC's or the reconciler's)."""
    describe(trace.get_current_span(), record)
