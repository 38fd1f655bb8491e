"""What the core says happened, for whoever listens: one small interface, beside the path.

The core never imports telemetry, metrics or the audit line (an import-linter contract keeps it
so). At each point worth observing it calls the installed `Observer`: around an Execute and
around each provider call (as context managers, like an interceptor around the core's calls),
and once for each thing that happened. The base class does nothing, so a core built alone (the
simulator, a unit test) runs with no observability at all; the runtime installs the gateway's
(observability/observer.py), which turns each call into spans, metrics and audit lines.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType
from typing import Protocol

from effectgate.adapters.base import Observation
from effectgate.gateway.model import ActionRecord


class ExecuteWatch(Protocol):
    """One Execute in progress; told its result when it ends."""

    def done(self, record: ActionRecord, replayed: bool) -> None: ...


class ProviderWatch(Protocol):
    """One adapter call in progress; told what a read-back observed."""

    def observed(self, observation: Observation) -> None: ...


class _Unwatched:
    """The do-nothing watch of both kinds."""

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

    def provider_call(
        self, operation: str, record: ActionRecord, adapter: str
    ) -> AbstractContextManager[ProviderWatch]:
        """Around one adapter call (`execute` or `verify`)."""
        return _UNWATCHED

    def traceparent(self) -> str:
        """The W3C `traceparent` a new action records as its origin; "" when none."""
        return ""

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

    def credentials_refused(self, adapter: str, at: float) -> None:
        """The provider refused the adapter's credentials."""

    def credentials_accepted(self, adapter: str) -> None:
        """The provider answered a call of the adapter."""

    def read_lag(self, lag_key: str, seconds: float, p50: float, p99: float) -> None:
        """A read lag was measured (with the quantiles kept so far)."""

    def limit_denied(self, tool: str, reason: str) -> None:
        """A limit refused an action of `tool`."""

    def breaker_changed(self, tool: str, state: str, why: str) -> None:
        """A tool's circuit breaker changed state."""

    def approval_expired(self, record: ActionRecord) -> None:
        """An approval's TTL passed: the action was expired."""

    def waits_changed(self, delta: int) -> None:
        """Calls waiting on an action (WaitAction): one more (+1) or one fewer (-1)."""


class Installed:
    """The observer the core reports to (the do-nothing base until the runtime installs one)."""

    def __init__(self) -> None:
        self.observer = Observer()


INSTALLED = Installed()


def install(observer: Observer) -> None:
    """From now on the core reports to `observer` (the runtime installs the gateway's)."""
    INSTALLED.observer = observer
