"""What the core says happened, for whoever listens: one small interface, beside the path.

The core never imports telemetry, metrics or the audit line (an import-linter contract keeps it
so). At each point worth observing it calls its replica's `Observer` (one per replica, handed to
`Collaborators`): around an Execute and around each provider call (as context managers, like an
interceptor around the core's calls), and once for each thing that happened. The base class does
nothing, so a core built alone (a unit test) runs with no observability at all; a replica
(runtime/replica.py) gets the gateway's (runtime/observing.py), which turns each call into spans,
metrics and audit lines (all of one Execute's in one module, observability/calls.py), and hands
the facts worth a notification to the [[notify]] deliverer's subscriber
(background/notify/notices.py).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType
from typing import Protocol

from effectgate.adapters.base import Observation
from effectgate.gateway.model import ActionRecord, LimitExceeded


class ExecuteWatch(Protocol):
    """One Execute in progress; told its result when it ends. `traceparent`: the W3C context a
    new action records as its origin ("" when none)."""

    traceparent: str

    def done(self, record: ActionRecord, replayed: bool) -> None: ...


class ProviderWatch(Protocol):
    """One adapter call in progress; told what a read-back observed. How the call ended (its
    exception, if any: a refusal of the gateway's credentials among them) the watch sees itself."""

    def observed(self, observation: Observation) -> None: ...


class _Unwatched:
    """The do-nothing watch of both kinds."""

    traceparent = ""

    def __enter__(self) -> _Unwatched:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def done(self, record: ActionRecord, replayed: bool) -> None:
        return None

    def observed(self, observation: Observation) -> None:
        return None


_UNWATCHED = _Unwatched()


class Observer:
    """Every point the core reports; each does nothing here. Subclass and override what you need."""

    # -- around the core's calls --

    def execute(self, tool: str, tool_call_id: str) -> AbstractContextManager[ExecuteWatch]:
        """Around one Execute: `with observer.execute(...) as call:`, `call.done(record, replayed)`."""
        return _UNWATCHED

    def replayed(self, record: ActionRecord, tool_call_id: str, started: float) -> None:
        """An Execute the replay cache answered, with no command built (`ExecutePath.replay`;
        `started`: `time.perf_counter()` when it began): what `execute` around it would see."""
        with self.execute(record.tool, tool_call_id) as call:
            call.done(record, True)

    def provider_call(
        self, operation: str, record: ActionRecord, adapter: str
    ) -> AbstractContextManager[ProviderWatch]:
        """Around one adapter call (`execute` or `verify`)."""
        return _UNWATCHED

    # -- what happened --

    def waited_on_holder(self) -> None:
        """This Execute waits for another worker's drive (single flight)."""

    def lease_taken_over(self, before: ActionRecord) -> None:
        """A repeat took over an action whose lease had run out."""

    def settled(self, record: ActionRecord) -> object:
        """A drive ended with `record` (what it returns is not read)."""
        return None

    def store_error(self, site: str) -> None:
        """The store failed under `site` (`protocol`, `drive`)."""

    def read_lag(self, lag_key: str, seconds: float, p50: float, p99: float) -> None:
        """A read lag was measured (with the quantiles kept so far)."""

    def limit_denied(self, record: ActionRecord, error: LimitExceeded, at: float) -> None:
        """A limit refused `record` (never stored) at `at`; `error` says which and its figures."""

    def breaker_changed(self, tool: str, state: str, why: str, at: float) -> None:
        """A tool's circuit breaker changed `state` at `at` (the breaker's clock)."""

    def breaker_opened(self, tool: str, why: str, at: float) -> None:
        """A tool's circuit breaker opened at `at`, for `why` (after its `breaker_changed`)."""

    def approval_expired(self, record: ActionRecord) -> None:
        """An approval's TTL passed: the action was expired."""

    def waits_changed(self, delta: int) -> None:
        """Calls waiting on an action (WaitAction): one more (+1) or one fewer (-1)."""
