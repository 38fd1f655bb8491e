"""The stops a walk of one Execute makes through the gateway's code (issue 45's measure): the
modules of `effectgate.gateway` whose functions run while one Execute is served, in order,
background jobs left out; for a new action and for a replay, on an in-process gateway on SQLite.

    .venv/bin/python scripts/execute_walk.py [-v] [--cpu N]

A stop is a module entered from another one (consecutive calls inside one module count once).
tests/test_execute_walk.py runs this script (this file is the measure) and holds a new action to
at most 25 distinct modules and observability to one. The process installs no logging handler:
under `effectgate serve`, whose handlers format each log line, the settled action's audit line
also passes through their formatter and filter (observability/logging_setup, log_lines), two
modules more that the standard library calls, not the gateway's path.
`--cpu N` also runs N replays through the Execute handler as the server registers it (admission,
the service, the protocol, the answer's bytes; no transport) on one thread, and prints the CPU
and the Python calls per replay: what the gateway's own code costs a replay, steadier than a
benchmark over sockets on a loaded machine (compare two trees side by side).
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
import types
from types import FrameType
from typing import Any, cast

import grpc
from google.protobuf import any_pb2

from effectgate.client import RunContext
from effectgate.gateway.rpc import Admission, Authenticator, EffectGatewayService, Limits
from effectgate.testing import ScriptedAdapter, gateway
from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc

MARK = "/effectgate/gateway/"


def charge() -> tools_pb2.ChargeCard:
    return tools_pb2.ChargeCard(customer="cus_1", amount=1, currency="usd", payment_method="pm_card_visa")


async def walk(kind: str) -> list[str]:
    """The modules entered while one Execute (`new` or `replay`) is served, after a warm-up."""
    cards = ScriptedAdapter(time.time)
    async with gateway(adapters={"cards": cards}, store="sqlite", settings={"reconcile_interval": "1h"}) as gw:
        warm = RunContext(run_id="warm", step_id="s")
        for _ in range(2):  # the first call imports and caches; the second is a replay
            await gw.client.execute("cards", charge(), scope="invoice:1", context=warm)
        seen: list[str] = []

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call":
                name = frame.f_code.co_filename
                at = name.find(MARK)
                if at >= 0 and not name[at + len(MARK) :].startswith("background"):
                    seen.append(name[at + len(MARK) : -3])

        context = RunContext(run_id="walk" if kind == "new" else "warm", step_id="s")
        sys.setprofile(profile)
        try:
            await gw.client.execute("cards", charge(), scope="invoice:1", context=context)
        finally:
            sys.setprofile(None)
    return [m for i, m in enumerate(seen) if i == 0 or seen[i - 1] != m]


def observed(stops: list[str]) -> collections.Counter[str]:
    """How many times the walk entered each observability module."""
    return collections.Counter(m for m in stops if m.startswith("observability"))


class _Handlers:
    """Stands in for the grpc server at registration: keeps the wrapped handlers."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        # Every method is found by name (rpc/admission.py's GenericOnly), as grpc finds it.
        method = types.SimpleNamespace(method="/effectgate.v1.EffectGateway/Execute", invocation_metadata=())
        for generic in handlers:
            self.handlers["Execute"] = self.handlers.get("Execute") or generic.service(method)

    def add_registered_method_handlers(self, service: str, handlers: Any) -> None:
        pass


class _Context:
    """The little of a grpc servicer context a successful Execute reads."""

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def time_remaining(self) -> None:
        return None


async def replay_cpu(count: int) -> tuple[float, int]:
    """A replay as the server runs it, without grpc's transport: the Execute handler as registered
    (admission, the service, the protocol, the answer), called `count` times on one thread.
    Answers (microseconds of CPU per replay, Python calls per replay)."""
    cards = ScriptedAdapter(time.time)
    async with gateway(adapters={"cards": cards}, store="sqlite", settings={"reconcile_interval": "1h"}) as gw:
        context = RunContext(run_id="cpu", step_id="s")
        await gw.client.execute("cards", charge(), scope="invoice:1", context=context)
        protocol = gw.server.protocol
        service = EffectGatewayService(protocol, Limits.for_server(256, 4096, 4 << 20), protocol.now)
        registry = _Handlers()
        Admission(Authenticator([])).register(
            cast(grpc.aio.Server, registry), gateway_pb2_grpc.add_EffectGatewayServicer_to_server, service
        )
        handler = registry.handlers["Execute"]
        payload = any_pb2.Any()
        payload.Pack(charge())
        request = pb.ExecuteRequest(
            context=context.to_pb(), tool="cards", scope="invoice:1", payload=payload, tool_call_id="call-cpu"
        ).SerializeToString()
        behavior, decode, served = handler.unary_unary, handler.request_deserializer, _Context()
        for _ in range(1000):  # warm-up
            await behavior(decode(request), served)
        started = time.thread_time()
        for _ in range(count):
            await behavior(decode(request), served)
        cpu = (time.thread_time() - started) / count * 1e6
        calls = 0

        def counted(frame: FrameType, event: str, arg: Any) -> None:
            nonlocal calls
            calls += event == "call"

        sys.setprofile(counted)
        try:
            await behavior(decode(request), served)
        finally:
            sys.setprofile(None)
    return cpu, calls


def main() -> None:
    for kind in ("new", "replay"):
        stops = asyncio.run(walk(kind))
        entered = observed(stops)
        print(
            f"{kind}: {len(stops)} stops, {len(set(stops))} distinct modules; observability entered "
            f"{sum(entered.values())} times in {len(entered)} modules {dict(entered)}"
        )
        if "-v" in sys.argv:
            print("  " + " > ".join(stops))
    if "--cpu" in sys.argv:
        count = int(sys.argv[sys.argv.index("--cpu") + 1])
        cpu, calls = asyncio.run(replay_cpu(count))
        print(f"replay, the handler as registered, no transport: {cpu:.1f} us CPU, {calls} Python calls")


if __name__ == "__main__":
    main()
