"""OpenTelemetry spans for the effect protocol (API only: a no-op until the host process installs
an SDK and exporter, e.g. `opentelemetry-instrument effectgate serve …`).

Spans carry ids and states, never payloads or provider error text: exceptions are not recorded
verbatim (`record_exception=False`), only their type and the adapter's safe message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from effectgate.gateway.domain import ActionRecord

tracer = trace.get_tracer("effectgate")


@contextmanager
def span(name: str, **attributes: str | int | bool) -> Iterator[Span]:
    with tracer.start_as_current_span(
        name,
        attributes={f"effectgate.{k}": v for k, v in attributes.items()},
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except Exception as exc:
            current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def describe(current: Span, record: ActionRecord, **extra: str | int | bool) -> None:
    """Attributes of the action as it stands now."""
    current.set_attributes(
        {
            "effectgate.action_id": record.action_id,
            "effectgate.state": record.state.value,
            "effectgate.attempts": record.attempts,
            "effectgate.run_id": record.run_id,
            "effectgate.step_id": record.step_id,
            **{f"effectgate.{k}": v for k, v in extra.items()},
        }
    )
