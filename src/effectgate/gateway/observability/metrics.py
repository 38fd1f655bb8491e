"""The gateway's metrics, through the OpenTelemetry metrics API (no-ops until an SDK is set up):
every instrument of the call path (the upper-case names), which `calls` records itself with no
call into this module, and what the background jobs and the rare points report.

Label sets are bounded: tools and adapters come from the config, outcomes, paths and classes
from fixed sets below; never an action id, run id or tenant. docs/observability.md lists them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from effectgate.gateway.model import ActionRecord, State

log = logging.getLogger("effectgate.metrics")
meter = metrics.get_meter("effectgate")


class Metering:
    """Whether `telemetry_sdk.setup` (the one place that installs a meter provider) did: until then
    the instruments below drop what they are given, and the call path's figures (`calls`) are
    not handed to them (an attribute: the check per call is no call; each API instrument's
    record is one)."""

    on = False


METERING = Metering()

# Buckets in seconds: a replay is ~1 ms, a new action a few ms, a provider call up to its timeout.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

ACTIONS = meter.create_counter("effectgate.actions", unit="{call}", description="Execute answers by tool and outcome")
EXECUTE_DURATION = meter.create_histogram(
    "effectgate.execute.duration",
    unit="s",
    description="Execute latency by path (new, replay, waited, refused)",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
)
PROVIDER_DURATION = meter.create_histogram(
    "effectgate.provider.duration",
    unit="s",
    description="Provider call latency by adapter, operation and result class",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
)
PROVIDER_ERRORS = meter.create_counter(
    "effectgate.provider.errors", unit="{call}", description="Failed provider calls by adapter, operation and class"
)
VERIFICATIONS = meter.create_counter(
    "effectgate.verifications", unit="{check}", description="Read-back outcomes by tool"
)
_claims = meter.create_counter(
    "effectgate.reconciler.claims", unit="{action}", description="Actions claimed by the reconciler, by reason"
)
_lag = meter.create_histogram(
    "effectgate.reconciler.lag",
    unit="s",
    description="How late the reconciler picked due work up (UNKNOWN: after next_check_at; abandoned: "
    "after the dead worker's last write)",
    explicit_bucket_boundaries_advisory=(0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0),
)
_takeovers = meter.create_counter(
    "effectgate.lease.takeovers", unit="{action}", description="Actions taken over from a worker whose lease expired"
)
_store_errors = meter.create_counter(
    "effectgate.store.errors", unit="{error}", description="Store operations that failed (store unavailable)"
)
_operator_acts = meter.create_counter(
    "effectgate.operator.acts", unit="{act}", description="Operator acts by kind (verify, approve, reconcile, ...)"
)
_auth_failures = meter.create_counter(
    "effectgate.auth.failures",
    unit="{call}",
    description="Calls refused before their handler ran, by reason (missing, malformed, unknown_token, "
    "role_required, tool_not_allowed) and method",
)


def reconciler_claimed(records: Sequence[ActionRecord], now: float) -> None:
    for record in records:
        if record.state is State.UNKNOWN:
            reason, due = "recheck", record.next_check_at or record.updated_at
        elif record.state is State.DISPATCHED:  # its worker's lease ran out mid-flight
            reason, due = "abandoned", record.updated_at
            _takeovers.add(1, {"tool": record.tool, "site": "reconciler"})
        else:  # PLANNED: approved and waiting, or left before anything was sent
            reason, due = "planned", record.updated_at
        _claims.add(1, {"reason": reason})
        _lag.record(max(0.0, now - due), {"reason": reason})


def lease_taken_over(before: ActionRecord) -> None:
    """An Execute found the action in flight under an expired lease and took it."""
    if before.lease_owner and not before.state.terminal:
        _takeovers.add(1, {"tool": before.tool, "site": "execute"})


def store_error(site: str) -> None:
    _store_errors.add(1, {"site": site})


def operator_act(act: str) -> None:
    _operator_acts.add(1, {"act": act})


_approvals_expired = meter.create_counter(
    "effectgate.approvals.expired", unit="{action}", description="Actions whose approval expired, by tool"
)


def approval_expired(tool: str) -> None:
    _approvals_expired.add(1, {"tool": tool})


def auth_failure(cause: str, method: str) -> None:
    service, _, name = method.lstrip("/").partition("/")
    _auth_failures.add(1, {"reason": cause, "grpc_service": service, "grpc_method": name})


# -- every RPC, in the conventional forms --------------------------------------------------------

# go-grpc-prometheus' counter (grpc_server_handled_total), which dashboards and alert rules
# already know, and the OpenTelemetry semantic conventions' duration histogram. The counter is
# observed, not added to: an RPC bumps a plain integer (`calls.RpcMetrics`, a tenth of a
# microsecond) and the exporter reads the totals when it collects; an SDK counter's `add` costs
# several microseconds, which the replay path (a few tens of microseconds) would feel.
RPC_DURATION = meter.create_histogram(
    "rpc.server.duration",
    unit="s",
    description="RPC latency on the server, by method and gRPC status code",
    explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
)


class CountedMethod(Protocol):
    """One method's counts by status code, kept by `calls.RpcMetrics`."""

    kind: str
    service: str
    method: str
    counts: dict[str, int]


RPC_METHODS: list[CountedMethod] = []


def _observe_handled(options: CallbackOptions) -> Iterable[Observation]:
    seen: list[Observation] = []
    for counted in list(RPC_METHODS):
        labels = {"grpc_type": counted.kind, "grpc_service": counted.service, "grpc_method": counted.method}
        # list(): one copy under the GIL, so a code first seen meanwhile cannot break the loop.
        seen += [Observation(n, {**labels, "grpc_code": code}) for code, n in list(counted.counts.items())]
    return seen


meter.create_observable_counter(
    "grpc.server.handled",
    [_observe_handled],
    unit="{call}",
    description="RPCs completed on the server, by method and gRPC status code",
)


# -- backlogs: UNKNOWN, AWAITING_APPROVAL ---------------------------------------------------------


@dataclass
class Backlog:
    """The last reading of one backlog (the gauges report it; a background job refreshes it)."""

    count: int = 0
    oldest_created_at: float | None = None
    read: bool = False


BACKLOG = Backlog()  # UNKNOWN: what the gateway could not prove
APPROVALS = Backlog()  # AWAITING_APPROVAL: what waits for a person
PAGE, MAX_PAGES = 500, 20  # at most 10 000 actions read per tenant, state and pass


def _gauges(backlog: Backlog, name: str, what: str) -> None:
    def count(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(backlog.count)] if backlog.read else []

    def age(options: CallbackOptions) -> Iterable[Observation]:
        if not backlog.read:
            return []
        oldest = backlog.oldest_created_at
        return [Observation(0.0 if oldest is None else max(0.0, time.time() - oldest))]

    meter.create_observable_gauge(
        f"effectgate.{name}.backlog", [count], unit="{action}", description=f"{what[0].upper()}{what[1:]} now"
    )
    meter.create_observable_gauge(
        f"effectgate.{name}.oldest_age",
        [age],
        unit="s",
        description=f"Age (since creation) of the oldest of the {what}; 0 when there is none",
    )


_gauges(BACKLOG, "unknown", "actions in UNKNOWN")
_gauges(APPROVALS, "approval", "actions in AWAITING_APPROVAL")


# -- clock offset ------------------------------------------------------------------------------


@dataclass
class ClockOffset:
    """The last measured offset of the store's clock to this host's (seconds, store minus host;
    set by background/clock_watch.py, reported by the gauge)."""

    seconds: float = 0.0
    measured: bool = False


CLOCK = ClockOffset()


def clock_offset(seconds: float) -> None:
    CLOCK.seconds, CLOCK.measured = seconds, True


def _observe_offset(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(CLOCK.seconds)] if CLOCK.measured else []


meter.create_observable_gauge(
    "effectgate.clock.offset",
    [_observe_offset],
    unit="s",
    description="The store's clock minus this host's, at the last probe (0 on SQLite: one host, one clock)",
)


_waits = meter.create_up_down_counter(
    "effectgate.waits", unit="{call}", description="WaitAction calls waiting now in this process"
)


def waits_changed(delta: int) -> None:
    _waits.add(delta)


# -- refused credentials -------------------------------------------------------------------------

CREDENTIAL_REFUSALS = meter.create_counter(
    "effectgate.provider.auth_failures",
    unit="{call}",
    description="Provider calls refused for the gateway's own credentials (HTTP 401/403, SMTP login), by adapter",
)
# adapter -> when its credentials were first refused since the last call it accepted (kept by
# `calls`, with the provider calls).
REFUSED_SINCE: dict[str, float] = {}


def _refused(options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(1, {"adapter": a}) for a in list(REFUSED_SINCE)]


meter.create_observable_gauge(
    "effectgate.provider.credentials_refused",
    callbacks=[_refused],
    unit="{adapter}",
    description="1 for each adapter whose last provider call was refused for its credentials",
)


def refused_credentials() -> dict[str, float]:
    """adapter -> since when its credentials are refused (readiness shows it, docs/production.md)."""
    return dict(REFUSED_SINCE)
