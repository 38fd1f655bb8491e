"""The gateway's observer: what the core reports (core/observer.py) turned into spans, metrics,
audit lines and limit logs (observability/). Installed once by the server and the test kit; the
core itself never imports observability.

Most points are the observability wing's own functions, bound as they are (no extra call on the
path of a replay)."""

from __future__ import annotations

from effectgate.gateway.core import Observer, install
from effectgate.gateway.model import ActionRecord
from effectgate.gateway.observability import audit_log, limits_log, metrics, provider_metrics, telemetry


class GatewayObserver(Observer):
    execute = staticmethod(telemetry.execute_span)
    provider_call = staticmethod(telemetry.provider_span)
    traceparent = staticmethod(telemetry.traceparent)
    waited_on_holder = staticmethod(telemetry.waited_on_holder)
    lease_taken_over = staticmethod(metrics.lease_taken_over)
    store_error = staticmethod(metrics.store_error)
    credentials_refused = staticmethod(provider_metrics.credentials_refused)
    credentials_accepted = staticmethod(provider_metrics.credentials_accepted)
    read_lag = staticmethod(provider_metrics.read_lag)
    limit_denied = staticmethod(limits_log.denied)
    breaker_changed = staticmethod(limits_log.breaker_changed)
    waits_changed = staticmethod(metrics.waits_changed)
    settled = staticmethod(audit_log.settled)

    def approval_expired(self, record: ActionRecord) -> None:
        metrics.approval_expired(record.tool)
        audit_log.operator_act("expire", "effectgate", record.reason, record)


def observe() -> None:
    """The core reports to the gateway's observer from now on (idempotent)."""
    install(GatewayObserver())
