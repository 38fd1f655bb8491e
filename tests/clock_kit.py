"""Parts of the clock tests (tests/test_clock_skew.py): replicas on one PostgreSQL in front of a
slow, lagging provider with no idempotency keys, a replica under libfaketime, a TCP proxy that can
stop forwarding, and an agent that fails over to the next replica on UNAVAILABLE."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import any_pb2, struct_pb2

from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.crm_sim import CrmSimulator
from tests.adapter_targets import scenario
from tests.harness import config_doc
from tests.test_replicas import error_reason

KEY_ENV, KEY = "EFFECTGATE_TEST_CRM_KEY", "crm-clock-key"
TOOL, STEP = "record_invoice", "bill"
LEASE_TTL, ATTEMPT_TIMEOUT, WINDOW, RECONCILE = 6.0, 2.0, 3.0, 1.0


def faketime_lib() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return found[0] if found else ""


def faketime_env(offset: str = "", timestamp_file: Path | None = None) -> dict[str, str]:
    """The environment of a process whose wall clock is `offset` off ("+15s") or read from
    `timestamp_file` at every call; its monotonic clock stays the real one."""
    env = {"LD_PRELOAD": faketime_lib(), "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    if timestamp_file is not None:
        env |= {"FAKETIME_TIMESTAMP_FILE": str(timestamp_file), "FAKETIME_NO_CACHE": "1"}
    else:
        env["FAKETIME"] = offset
    return env


def slow_crm() -> CrmSimulator:
    """Writes land 0.4-1.6 s after they are sent; reads show them 1 s after they landed."""
    return CrmSimulator(api_key=KEY, read_lag=1.0, write_delay=(0.4, 1.6))


def replica_config(path: Path, dsn: str, crm: CrmSimulator, *, max_clock_skew: str = "", metrics: bool = False) -> Path:
    gateway: dict[str, Any] = {
        "lease_ttl": f"{LEASE_TTL:g}s",
        "reconcile_interval": f"{RECONCILE:g}s",
        "recheck_min": "0.5s",
        "health_interval": "1s",
    }
    if max_clock_skew:
        gateway["max_clock_skew"] = max_clock_skew
    adapter = scenario("crm_invoice") | {"base_url": crm.base_url, "token_env": KEY_ENV, "timeout": 5}
    doc = config_doc(
        dsn,
        gateway=gateway,
        adapters={"crm": adapter},
        tools={
            TOOL: {
                "adapter": "crm",
                "consistency_window": f"{WINDOW:g}s",
                "attempt_timeout": f"{ATTEMPT_TIMEOUT:g}s",
                "deadline": "15s",
            }
        },
    )
    if metrics:  # on a port of its own choosing, announced (GatewayProcess.metrics_port)
        doc["telemetry"] = {"prometheus_listen": "127.0.0.1:0"}
    return write_config(doc, path)


def invoice(run: str, call: str = "") -> pb.ExecuteRequest:
    body = struct_pb2.Struct()
    body.update({"id": f"inv_{run}", "amount": 1250, "currency": "usd"})
    packed = any_pb2.Any()
    packed.Pack(body)
    return pb.ExecuteRequest(
        context=pb.RunContext(run_id=run, step_id=STEP), tool=TOOL, scope="invoices", payload=packed, tool_call_id=call
    )


def invoices_at_provider(crm: CrmSimulator) -> Counter[str]:
    """Invoice rows the provider stored, by invoice id (a duplicate is a count of 2)."""
    return Counter(str(e["params"]["id"]) for e in crm.ledger if e["kind"] == "invoice")


class Agent:
    """Calls replicas in order; on UNAVAILABLE it goes on to the next one (a client with a list of
    endpoints), and records the ErrorInfo reasons it met."""

    def __init__(self, targets: dict[str, str]) -> None:
        self.channels = {name: grpc.aio.insecure_channel(t) for name, t in targets.items()}
        self.refusals: Counter[tuple[str, str]] = Counter()

    def stub(self, name: str) -> gateway_pb2_grpc.EffectGatewayAsyncStub:
        return gateway_pb2_grpc.EffectGatewayStub(self.channels[name])

    async def execute(self, run: str, order: Sequence[str], call: str = "") -> pb.Action:
        async with asyncio.timeout(60):
            while True:
                for name in order:
                    try:
                        return (await self.stub(name).Execute(invoice(run, call), timeout=20)).action
                    except grpc.aio.AioRpcError as exc:
                        if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED):
                            raise
                        self.refusals[(name, error_reason(exc) or exc.code().name)] += 1
                await asyncio.sleep(0.5)

    async def settled(self, run: str, via: str, timeout: float = 40.0) -> pb.Action:
        """Polls until the action is CONFIRMED or REJECTED."""
        got = pb.Action()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while got.state not in (pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED):
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        got = await self.stub(via).GetAction(pb.GetActionRequest(action_id=got_id(run)), timeout=5)
                    await asyncio.sleep(0.1)
                return got
        raise AssertionError(f"{run} did not settle in {timeout}s: {got}")

    async def close(self) -> None:
        for channel in self.channels.values():
            await channel.close(grace=None)


def got_id(run: str) -> str:
    from effectgate.gateway.model.keys import action_id

    return action_id("dev", run, STEP, TOOL, "invoices")


async def until(check: Callable[[], bool | Awaitable[bool]], timeout: float, what: str) -> float:
    """Polls `check` until it holds; returns how long that took; fails after `timeout`."""
    watch = Stopwatch()
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return watch()
        if watch() > timeout:
            raise AssertionError(f"not {what} after {timeout:g}s")
        await asyncio.sleep(0.05)


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.start


class FreezableProxy:
    """A TCP proxy (loopback) that forwards until `freeze()`: then it holds every byte in both
    directions (a partition: connections stay open, nothing arrives) until `heal()`, which lets
    the held bytes through late, as TCP would after a partition heals."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._trigger = b""
        self.port = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def freeze(self) -> None:
        self._open.clear()

    def freeze_on(self, pattern: bytes) -> None:
        """Freezes when `pattern` next goes upstream, before those bytes are forwarded."""
        self._trigger = pattern

    @property
    def frozen(self) -> bool:
        return not self._open.is_set()

    def heal(self) -> None:
        self._open.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        for src, dst, upstream in ((reader, up_writer, True), (up_reader, writer, False)):
            task = asyncio.create_task(self._pump(src, dst, upstream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool) -> None:
        try:
            while data := await src.read(65536):
                if upstream and self._trigger and self._trigger in data:
                    self._trigger = b""
                    self.freeze()
                await self._open.wait()
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            dst.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
