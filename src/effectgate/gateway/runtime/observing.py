"""The gateway's observer, one per replica (runtime/replica.py builds it): what the core reports
(core/observer.py) turned into spans, metrics, audit lines and limit logs; the core itself never
imports observability.

The points on the path of an Execute (the Execute's watch, the provider call's, the wait behind
another worker, the settled line) are the functions of one module, `observability/calls.py`,
bound as they are: no extra call here, and one Execute enters observability in that one module.
The other points are rarer: a lease taken over, a store error, a read lag, a wait on an action
(observability's `metrics`, `provider_metrics`), and the rare points that also go to the
replica's other subscribers, the [[notify]] deliverer's (background/notify/notices.py): a
denial, a breaker's change, an expired approval. This class lives in runtime, above the core
whose interface it subclasses; observability sits below the core (import-linter's layers).
"""

from __future__ import annotations

from effectgate.gateway.core import Observer
from effectgate.gateway.model import ActionRecord, LimitExceeded
from effectgate.gateway.observability import audit_log, calls, limits_log, metrics, provider_metrics


class GatewayObserver(Observer):
    execute = staticmethod(calls.ExecuteCall)
    replayed = staticmethod(calls.replayed)
    provider_call = staticmethod(calls.provider_span)
    waited_on_holder = staticmethod(calls.waited_on_holder)
    settled = staticmethod(calls.settled)
    lease_taken_over = staticmethod(metrics.lease_taken_over)
    store_error = staticmethod(metrics.store_error)
    read_lag = staticmethod(provider_metrics.read_lag)
    waits_changed = staticmethod(metrics.waits_changed)

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
