"""Metrics of what providers say on their own: webhook deliveries, drift findings, read lags (the
refusals of the gateway's credentials are counted with the provider calls, in `calls`).

Labels are bounded: adapters and lag keys come from the config, outcomes and kinds from fixed
sets (docs/webhooks.md lists them).
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

meter = metrics.get_meter("effectgate")

_webhooks = meter.create_counter(
    "effectgate.webhooks",
    unit="{delivery}",
    description="Webhook deliveries by adapter and outcome (settled, noted, ignored, unmatched, busy, forged, "
    "stale, replayed, malformed)",
)
_provider_events = meter.create_counter(
    "effectgate.provider.events", unit="{event}", description="Refunds and disputes reported by providers, by adapter"
)
_read_lag = meter.create_histogram(
    "effectgate.provider.read_lag",
    unit="s",
    description="How long after a confirmed write the provider's read API first showed it, by lag key",
    explicit_bucket_boundaries_advisory=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
)
# Latest p50/p99 of the observed read lags, by lag key (and quantile); and the drift audit's counts.
_lag_quantiles: dict[tuple[str, str], float] = {}
_drift: dict[str, int] = {}


def _quantiles(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(v, {"lag_key": k, "quantile": q}) for (k, q), v in list(_lag_quantiles.items())]


def _drift_counts(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(v, {"finding": k}) for k, v in list(_drift.items())]


meter.create_observable_gauge(
    "effectgate.provider.read_lag_quantile",
    callbacks=[_quantiles],
    unit="s",
    description="p50 and p99 of the observed read lags, by lag key",
)
meter.create_observable_gauge(
    "effectgate.drift.findings",
    callbacks=[_drift_counts],
    unit="{finding}",
    description="Findings of the last drift audit, by kind (untracked, missing, mismatch)",
)


def webhook(adapter: str, outcome: str) -> None:
    _webhooks.add(1, {"adapter": adapter, "outcome": outcome})


def provider_event(adapter: str, kind: str) -> None:
    _provider_events.add(1, {"adapter": adapter, "kind": kind})


def read_lag(lag_key: str, seconds: float, p50: float, p99: float) -> None:
    _read_lag.record(seconds, {"lag_key": lag_key})
    _lag_quantiles[(lag_key, "p50")] = p50
    _lag_quantiles[(lag_key, "p99")] = p99


def drift_found(counts: dict[str, int]) -> None:
    _drift.clear()
    _drift.update(counts)
