"""Notifications' metrics ([[notify]], docs/notifications.md): deliveries by sink and outcome
(`delivered`, `retry`, `failed`), how long after its event a notification was taken, the outbox's
rows by sink and status (`pending`, `failed`, read by the deliverer each pass), and the notices
dropped because the queue was full. Labels: the sink's name (from the config), fixed words."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

meter = metrics.get_meter("effectgate")

_deliveries = meter.create_counter(
    "effectgate.notify.deliveries", unit="{attempt}", description="Notification attempts by sink and outcome"
)
_latency = meter.create_histogram(
    "effectgate.notify.latency",
    unit="s",
    description="From the event to its notification's delivery, by sink",
    explicit_bucket_boundaries_advisory=(0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 86400.0),
)
_dropped = meter.create_counter(
    "effectgate.notify.dropped", unit="{notice}", description="Notices dropped because the queue was full"
)
_broken = meter.create_counter(
    "effectgate.notify.broken_events",
    unit="{event}",
    description="Event rows the deliverer skipped because they do not decode (by the first column that does not)",
)
# (sink, status) -> rows: replaced whole at each reading.
OUTBOX: dict[tuple[str, str], int] = {}


def delivery(sink: str, outcome: str) -> None:
    _deliveries.add(1, {"sink": sink, "outcome": outcome})


def latency(sink: str, seconds: float) -> None:
    _latency.record(seconds, {"sink": sink})


def dropped(kind: str) -> None:
    _dropped.add(1, {"kind": kind})


def broken_row(column: str) -> None:
    _broken.add(1, {"column": column})


def outbox_read(counts: Mapping[tuple[str, str], int]) -> None:
    OUTBOX.clear()
    OUTBOX.update(counts)


def _observe(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(n, {"sink": sink, "status": status}) for (sink, status), n in list(OUTBOX.items())]


meter.create_observable_gauge(
    "effectgate.notify.outbox", [_observe], unit="{notification}", description="Outbox rows by sink and status"
)
