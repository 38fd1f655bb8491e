"""A gateway's whole graceful shutdown fits in `shutdown_grace` (issue 46): one deadline for every
phase. A real `effectgate serve` with a call still in flight (the provider holds the charge for
minutes) gets SIGTERM; the gRPC server's wait for its calls, the drives' drain and the closing all
take their budgets from one deadline (each phase's budget is what the previous ones left), and
the whole shutdown, timed by the gateway's own clock, ends within the grace plus the event loop's
lateness. Before, each waiting phase had the whole grace: 2 x grace with this call in flight."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import grpc

from effectgate.gateway.runtime.shutdown import CLOSING_MAX, CLOSING_SHARE
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, config_doc, stripe_tools
from tests.otlp_receiver import ChildGateway
from tests.test_execute import request

GRACE = 4.0
# The loop's timers fire late on a loaded machine; a phase abandoned at the deadline ends within
# this much after it. Well under the grace the old shutdown spent a second time on the drives.
LATENESS = 1.0
# A loaded machine's process start and exit: only a hang fails this one.
EXIT_WITHIN = GRACE + 30.0


class HeldStripe(StripeSimulator):
    """Holds every charge for two minutes; `writing` is set when the first one arrives."""

    def __init__(self) -> None:
        super().__init__(api_key=API_KEY, latency=120.0)
        self.writing = asyncio.Event()

    async def write(self, *args: Any, **kwargs: Any) -> Any:
        self.writing.set()
        return await super().write(*args, **kwargs)


def shutdown_line(output: list[str]) -> dict[str, Any]:
    for line in output:
        if line.startswith("{") and '"shutdown_seconds"' in line:
            found: dict[str, Any] = json.loads(line)
            return found
    raise AssertionError("the gateway logged no shutdown line:\n" + "".join(output[-30:]))


async def test_the_whole_shutdown_fits_in_the_grace_with_a_call_in_flight(tmp_path: Path) -> None:
    sim = HeldStripe()
    await sim.start()
    tools = stripe_tools(sim.base_url, deadline="100s", attempt_timeout="100s")
    tools["adapters"]["stripe"]["timeout"] = 110
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", gateway={"lease_ttl": "120s"}, **tools)
    doc["server"]["shutdown_grace"] = f"{GRACE}s"
    gateway = ChildGateway(doc, tmp_path, {}, log_level="INFO", log_format="json")
    loop = asyncio.get_running_loop()
    try:
        target = await gateway.ready(timeout=60)
        async with grpc.aio.insecure_channel(target) as channel:
            call = asyncio.ensure_future(gateway_pb2_grpc.EffectGatewayStub(channel).Execute(request(), timeout=110))
            try:
                await asyncio.wait_for(sim.writing.wait(), 60)  # the charge is at the provider: in flight
                assert not call.done()
                sent = loop.time()
                gateway.proc.send_signal(signal.SIGTERM)
                code = await loop.run_in_executor(None, gateway.proc.wait, EXIT_WITHIN)
                exited = loop.time() - sent
            finally:
                call.cancel()
        assert code == 0, "".join(gateway.output[-30:])
        assert exited < EXIT_WITHIN
        assert gateway._reader is not None
        await gateway._reader
        line = shutdown_line(gateway.output)
        phases = {p["name"]: p for p in line["phases"]}
        assert list(phases) == ["calls", "drives", "background", "adapters", "store"], line
        reserve = min(GRACE * CLOSING_SHARE, CLOSING_MAX)
        # One deadline: the calls had the grace less closing's share, and waited it out (the call
        # was still in flight); the drives had only what the calls left.
        calls, drives = phases["calls"], phases["drives"]
        assert calls["budget"] <= GRACE - reserve + 0.001, line
        assert calls["took"] >= calls["budget"] - 0.05, line
        assert drives["budget"] <= max(calls["budget"] - calls["took"], 0.0) + 0.001, line
        # Closing had what was left of the same deadline (at least its floor).
        assert phases["background"]["budget"] <= GRACE - calls["took"] + 0.001 or phases["background"]["budget"] <= 0.25
        assert line["shutdown_grace"] == GRACE
        assert line["shutdown_seconds"] <= GRACE + LATENESS, line
    finally:
        gateway.kill()
        await sim.stop()
