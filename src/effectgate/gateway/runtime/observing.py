"""The gateway's observer: what the core reports (core/observer.py) turned into spans, metrics,
audit lines and limit logs (observability/), one per replica (runtime/replica.py builds it); the
core itself never imports observability.

Most points are the observability wing's own functions, bound as they are (no extra call on the
path of a replay). The rare points (a denial, a breaker's change, an expired approval) also go to
the replica's other subscribers: the [[notify]] deliverer's (background/notify/notices.py)."""

from __future__ import annotations

from effectgate.gateway.core import Observer
from effectgate.gateway.model import ActionRecord, LimitExceeded
from effectgate.gateway.observability import audit_log, limits_log, metrics, provider_metrics, telemetry


class GatewayObserver(Observer):
    execute = staticmethod(telemetry.ExecuteCall)
    provider_call = staticmethod(telemetry.provider_span)
    waited_on_holder = staticmethod(telemetry.waited_on_holder)
    lease_taken_over = staticmethod(metrics.lease_taken_over)
    store_error = staticmethod(metrics.store_error)
    read_lag = staticmethod(provider_metrics.read_lag)
    waits_changed = staticmethod(metrics.waits_changed)
    settled = staticmethod(audit_log.settled)

    def __init__(self) -> None:
        self.subscribers: list[Observer] = []

    def subscribe(self, subscriber: Observer) -> None:
        """`subscriber` hears the rare points too (denials, breakers, expiries)."""
        self.subscribers.append(subscriber)

    def limit_denied(self, record: ActionRecord, error: LimitExceeded, at: float) -> None:
        limits_log.denied(record.tool, error.reason)
        for subscriber in self.subscribers:
            subscriber.limit_denied(record, error, at)

    def breaker_changed(self, tool: str, state: str, why: str, at: float) -> None:
        limits_log.breaker_changed(tool, state, why)
        for subscriber in self.subscribers:
            subscriber.breaker_changed(tool, state, why, at)

    def breaker_opened(self, tool: str, why: str, at: float) -> None:
        for subscriber in self.subscribers:
            subscriber.breaker_opened(tool, why, at)

    def approval_expired(self, record: ActionRecord) -> None:
        metrics.approval_expired(record.tool)
        audit_log.operator_act("expire", "effectgate", record.reason, record)
        for subscriber in self.subscribers:
            subscriber.approval_expired(record)
