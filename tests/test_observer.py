"""The core reports what happened through one interface (core/observer.py) to its replica's
observer, which turns each report into spans, metrics and audit lines (runtime/observing.py)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from effectgate.client import RunContext, State
from effectgate.gateway.core import ExecuteWatch, Observer, ProviderWatch
from effectgate.gateway.model import ActionRecord
from effectgate.gateway.runtime.observing import GatewayObserver
from effectgate.testing import ScriptedAdapter, gateway
from effectgate.tools.v1.tools_pb2 import ChargeCard

CHARGE = ChargeCard(customer="cus_1", amount=1000, currency="usd", payment_method="pm_card_visa")


def test_the_gateway_observer_answers_every_point_the_core_reports() -> None:
    points = {name for name, _ in inspect.getmembers(Observer, inspect.isfunction) if not name.startswith("_")}
    missing = sorted(name for name in points if name not in vars(GatewayObserver))
    assert not missing, f"runtime/observing.py's GatewayObserver does not observe: {missing}"


class Recorder(GatewayObserver):
    """Keeps what the core reported, in order (and is its own watch: no trace to record)."""

    traceparent = ""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    @contextmanager
    def _watch(self, name: str) -> Iterator[Recorder]:
        self.seen.append(f"{name} begins")
        yield self
        self.seen.append(f"{name} ends")

    # The gateway's points are its observability functions, typed narrower than the interface's.
    def execute(self, tool: str, tool_call_id: str) -> AbstractContextManager[ExecuteWatch]:  # type: ignore[override]
        return self._watch(f"execute {tool}")

    def provider_call(  # type: ignore[override]
        self, operation: str, record: ActionRecord, adapter: str
    ) -> AbstractContextManager[ProviderWatch]:
        return self._watch(f"provider {operation}")

    def done(self, record: ActionRecord, replayed: bool) -> None:
        self.seen.append(f"done {record.state.value}{' replayed' if replayed else ''}")

    def replayed(self, record: ActionRecord, tool_call_id: str, started: float) -> None:
        self.seen.append(f"replayed {record.state.value}")
        Observer.replayed(self, record, tool_call_id, started)  # the interface's own: one Execute

    def observed(self, observation: object) -> None:
        self.seen.append("observed")

    def settled(self, record: ActionRecord) -> object:  # type: ignore[override]
        self.seen.append(f"settled {record.state.value}")
        return None


async def test_a_replicas_observer_hears_one_execute_and_its_replay() -> None:
    recorder = Recorder()
    cards = ScriptedAdapter(time.time)
    async with gateway(adapters={"cards": cards}, observer=recorder) as gw:
        context = RunContext(run_id="run-1", step_id="charge")
        first = await gw.client.execute("cards", CHARGE, scope="invoice:1", context=context)
        again = await gw.client.execute("cards", CHARGE, scope="invoice:1", context=context)
    assert first.action.state == State.CONFIRMED and again.replayed
    assert recorder.seen == [
        "execute cards begins",
        "provider execute begins",
        "provider execute ends",
        "settled CONFIRMED",
        "done CONFIRMED",
        "execute cards ends",
        # The replay cache's answer: one point, before any command is built (ExecutePath.replay),
        # which an observer that does not answer it hears as one Execute.
        "replayed CONFIRMED",
        "execute cards begins",
        "done CONFIRMED replayed",
        "execute cards ends",
    ]
