"""A real gateway for tests: in-process on a grpc.aio server (port 0), or as a child process
(`effectgate serve`) for crash tests, always talked to through the generated client."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import grpc

from effectgate.client import EffectGateClient
from effectgate.gateway.config import Config, parse_config
from effectgate.gateway.runtime.server import Gateway
from effectgate.v1 import gateway_pb2_grpc
from tests.gateway_forks import ForkedChild, popen_gateway

API_KEY = "sk_test_effectgate_canary_3f9a1c"
API_KEY_ENV = "EFFECTGATE_TEST_STRIPE_KEY"
os.environ.setdefault(API_KEY_ENV, API_KEY)


def config_doc(
    store_url: str,
    *,
    adapters: Mapping[str, Mapping[str, Any]],
    tools: Mapping[str, Mapping[str, Any]],
    gateway: Mapping[str, Any] | None = None,
    principals: Sequence[Mapping[str, Any]] | None = None,
    listen: str = "127.0.0.1:0",
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "server": {"listen": listen, "shutdown_grace": "2s"},
        "store": {"url": store_url},
        "gateway": {
            "lease_ttl": "3s",
            "reconcile_interval": "0.2s",
            "recheck_min": "0.2s",
            **(gateway or {}),
        },
        "adapters": {k: dict(v) for k, v in adapters.items()},
        "tools": {k: dict(v) for k, v in tools.items()},
    }
    if principals:
        doc["principals"] = principals
    return doc


def stripe_tools(api_base: str, **tool: Any) -> dict[str, Any]:
    """Adapters and tools tables for charge_card on a Stripe simulator."""
    return {
        "adapters": {"stripe": {"api_base": api_base, "api_key_env": API_KEY_ENV, "timeout": 5}},
        "tools": {
            "charge_card": {
                "adapter": "stripe",
                "consistency_window": "1s",
                "attempt_timeout": "2s",
                "deadline": "10s",
                **tool,
            }
        },
    }


WRONG_KEY_ENV = "EG_TEST_WRONG_KEY"


def stripe_tools_with_a_refused_key(api_base: str, **tool: Any) -> dict[str, Any]:
    """`stripe_tools`, plus `charge_wrong` on an adapter `stripe_wrong` whose key (from
    `WRONG_KEY_ENV`) the simulator refuses: a 401 that echoes the masked key and a WARNING line."""
    tools = stripe_tools(api_base, **tool)
    tools["adapters"]["stripe_wrong"] = {**tools["adapters"]["stripe"], "api_key_env": WRONG_KEY_ENV, "kind": "stripe"}
    tools["tools"]["charge_wrong"] = {**tools["tools"]["charge_card"], "adapter": "stripe_wrong"}
    return tools


@dataclass
class LiveGateway:
    gateway: Gateway
    client: EffectGateClient
    channel: grpc.aio.Channel
    target: str

    @property
    def stub(self) -> gateway_pb2_grpc.EffectGatewayAsyncStub:
        return self.client.stub

    @property
    def operator(self) -> gateway_pb2_grpc.OperatorAsyncStub:
        return self.client.operator

    async def close(self) -> None:
        await self.client.close()
        await self.gateway.stop()


async def start_gateway(config: Config | dict[str, Any], *, token: str = "") -> LiveGateway:
    cfg = config if isinstance(config, Config) else parse_config(config)
    gateway = await Gateway.start(cfg)
    target = f"127.0.0.1:{gateway.port}"
    channel = grpc.aio.insecure_channel(target)
    return LiveGateway(gateway, EffectGateClient(channel, token=token), channel, target)


# -- a gateway in a child process -----------------------------------------------------------


GatewayChild = subprocess.Popen[str] | ForkedChild


async def wait_for_line(
    proc: GatewayChild, pattern: str, output: list[str], timeout: float, what: str
) -> re.Match[str]:
    """Reads the child's output into `output` until a line matches `pattern`; then keeps
    draining the pipe in a thread, so the child never blocks on a full pipe."""
    assert proc.stdout is not None
    stdout = proc.stdout
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        line = await asyncio.wait_for(loop.run_in_executor(None, stdout.readline), end - loop.time())
        if not line:
            break
        output.append(line)
        found = re.search(pattern, line)
        if found:
            # A daemon thread, not the loop's executor: a loop that closes waits for its
            # executor's threads, and this one reads until the child exits.
            threading.Thread(target=_drain, args=(stdout, output), daemon=True).start()
            return found
    raise RuntimeError(f"{what} did not start:\n" + "".join(output))


async def output_line(proc: GatewayChild, pattern: str, output: list[str], timeout: float, what: str) -> str:
    """The first group of `pattern` in a line of `output` (filled by a reader thread, e.g. after
    `wait_for_line`), waiting for it until the child exits or `timeout`."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        exited = proc.poll() is not None
        for line in list(output):
            found = re.search(pattern, line)
            if found:
                return found.group(1)
        if exited or loop.time() > end:
            raise AssertionError(f"no {what} ({'exited' if exited else 'timed out'}):\n" + "".join(output))
        await asyncio.sleep(0.05)


def _drain(stdout: IO[str], output: list[str]) -> None:
    for line in stdout:  # each line as it comes: a test may read `output` meanwhile
        output.append(line)


LIVE: set[GatewayProcess] = set()  # killed after each test by conftest's `no_gateway_left_behind`


class GatewayProcess:
    """`effectgate serve` in a child process; `kill()` is a real SIGKILL, `stop()` a SIGTERM
    awaited without blocking the loop (the drain may be waiting for a simulator on that loop)."""

    def __init__(
        self, config_path: Path, *, crash_at: str = "", pause_at: str = "", env: Mapping[str, str] | None = None
    ) -> None:
        child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        child_env.pop("EFFECTGATE_CRASH_AT", None)
        child_env.pop("EFFECTGATE_PAUSE_AT", None)
        if crash_at:
            child_env["EFFECTGATE_CRASH_AT"] = crash_at
        if pause_at:
            child_env["EFFECTGATE_PAUSE_AT"] = pause_at
        # A fork of the test's gateway driver, or a process of its own under a failpoint
        # (tests/gateway_forks.py).
        self.proc = popen_gateway(["--log-level", "WARNING", "serve", "--config", str(config_path)], child_env)
        self.port = 0
        self.output: list[str] = []
        LIVE.add(self)

    async def ready(self, timeout: float = 60.0) -> int:
        # Generous: a gateway starts in about a second, but a loaded CI machine took over 20.
        found = await wait_for_line(self.proc, r"serving on port (\d+)", self.output, timeout, "gateway")
        self.port = int(found.group(1))
        return self.port

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def metrics_port(self, timeout: float = 60.0) -> int:
        """The metrics port it bound (`prometheus_listen = "127.0.0.1:0"`), from the line after
        its ready line (call `ready()` first)."""
        return int(await output_line(self.proc, r"metrics on port (\d+)", self.output, timeout, "the metrics line"))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(20)

    async def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return await self.wait_exit(timeout)

    async def wait_exit(self, timeout: float = 20.0) -> int:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.proc.wait, timeout)
