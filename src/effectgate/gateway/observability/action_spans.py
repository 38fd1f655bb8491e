"""What a span says of an action, in words every span of the gateway shares: the gateway's
tracer, the action's attributes, the W3C `traceparent` a new action records as its origin, and
the link from a later span back to that origin.

`calls` (the spans of one call) and `telemetry` (the reconciler's and an operator's act's) use
them. Only a span being recorded asks for them: with no tracer provider installed, an Execute
does not enter this module (`scripts/execute_walk.py`).
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, TraceFlags

from effectgate.gateway.model import ActionRecord

tracer = trace.get_tracer("effectgate")
Attr = str | int | bool


def action_attributes(record: ActionRecord) -> dict[str, Attr]:
    return {
        "effectgate.action_id": record.action_id,
        "effectgate.tool": record.tool,
        "effectgate.state": record.state.value,
        "effectgate.attempt": record.attempts,
    }


def describe(current: Span, record: ActionRecord) -> None:
    """Attributes of the action as it stands now, and a link to its first trace."""
    if not current.is_recording():
        return
    current.set_attributes(
        {
            **action_attributes(record),
            "effectgate.run_id": record.run_id,
            "effectgate.step_id": record.step_id,
        }
    )
    link = origin_link(record, current)
    linked = {(ln.context.trace_id, ln.context.span_id) for ln in getattr(current, "links", ())}
    if link is not None and (link.context.trace_id, link.context.span_id) not in linked:
        current.add_link(link.context, link.attributes)


def traceparent(current: Span) -> str:
    """The W3C `traceparent` of `current`; "" when nothing is recorded."""
    context = current.get_span_context()
    if not context.is_valid:
        return ""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def parse_traceparent(value: str) -> SpanContext | None:
    parts = value.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id = int(parts[1], 16)
        span_id = int(parts[2], 16)
        flags = int(parts[3], 16)
    except ValueError:
        return None
    context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 0xFF))
    return context if context.is_valid else None


def origin_link(record: ActionRecord, current: Span | None = None) -> Link | None:
    """A link to the span that created the action, unless `current` is in that same trace."""
    origin = parse_traceparent(getattr(record, "trace_parent", ""))
    if origin is None:
        return None
    if current is not None and current.get_span_context().trace_id == origin.trace_id:
        return None
    return Link(origin, {"effectgate.link": "action_origin", "effectgate.action_id": record.action_id})
