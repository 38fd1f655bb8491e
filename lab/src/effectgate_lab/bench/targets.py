"""The processes a benchmark run measures, each in its own process like in production: the Stripe
simulator, `effectgate serve` on a given store, the bare gRPC echo server, and the calls that
drive them (built once, so request building costs the same on every path)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import httpx
from google.protobuf import any_pb2

from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2, gateway_pb2_grpc
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.labkit.children import Child

API_KEY = "sk_test_bench"
KEY_ENV = "BENCH_STRIPE_KEY"
CHARGE = ChargeCard(customer="cus_bench", amount=500, currency="usd", payment_method="pm_card_visa")
FORM = {
    "customer": "cus_bench",
    "amount": "500",
    "currency": "usd",
    "payment_method": "pm_card_visa",
    "confirm": "true",
}


def simulator(logs: Path) -> Child:
    return Child(
        "effectgate_lab.simulators",
        ["stripe", "--api-key-env", KEY_ENV],
        announce=r"(http://\S+)",
        env={KEY_ENV: API_KEY},
        stderr_path=logs / "simulator.log",
    )


# Limits that every new action of the bench is counted against and never reaches: a budget, a
# rate limit and per-run caps (each new action reserves in three counter rows).
BENCH_LIMITS: dict[str, Any] = {
    "window": "1h",
    "max_effects": 1 << 40,
    "budget": {CHARGE.currency: 1 << 60},
    "run_max_effects": 1 << 40,
    "max_amount": 1 << 40,
}


def gateway(
    store_url: str,
    sim_url: str,
    workdir: Path,
    name: str,
    env: dict[str, str] | None = None,
    workers: int = 0,
    module: str = "effectgate.gateway",
    limits: dict[str, Any] | None = None,
    tools: dict[str, dict[str, Any]] | None = None,
    tables: dict[str, Any] | None = None,
) -> Child:
    """`effectgate serve` (with `--workers N` processes sharing its port when `workers`; `module`:
    another entry, e.g. the host-clock gateway of the clock comparison; `limits`: the tool's;
    `tools`: more `[tools.*]` beside charge_card; `tables`: more top-level tables, e.g. `notify`)."""
    tool: dict[str, Any] = {"adapter": "stripe", "consistency_window": "1s"}
    if limits:
        tool["limits"] = limits
    doc = {
        # Port 0: the gateway binds a free port and announces it. A port picked here and bound
        # there could be taken in between by another process of a busy machine.
        "server": {"listen": "127.0.0.1:0"},
        "store": {"url": store_url},
        "adapters": {"stripe": {"api_base": sim_url, "api_key_env": KEY_ENV}},
        "tools": {"charge_card": tool, **(tools or {})},
        **(tables or {}),
    }
    config = write_config(doc, workdir / f"{name}.toml")
    return Child(
        module,
        ["--log-level", "ERROR", "serve", "--config", str(config), *(["--workers", str(workers)] if workers else [])],
        announce=r"serving on port (\d+)",
        env={KEY_ENV: API_KEY, **(env or {})},
        stderr_path=workdir / f"{name}.log",
    )


def echo(response_file: Path, logs: Path) -> Child:
    return Child(
        "effectgate_lab.bench.echo",
        ["--response", str(response_file)],
        announce=r"serving on port (\d+)",
        stderr_path=logs / "echo.log",
    )


def otlp_sink(logs: Path) -> Child:
    return Child(
        "effectgate_lab.bench.otlp_sink", [], announce=r"otlp sink on (http://\S+)", stderr_path=logs / "otlp.log"
    )


async def sink_stats(endpoint: str) -> dict[str, int]:
    async with httpx.AsyncClient() as http:
        stats: dict[str, int] = (await http.get(f"{endpoint}/stats")).json()
        return stats


def execute_request(run_id: str, step_id: str) -> gateway_pb2.ExecuteRequest:
    packed = any_pb2.Any()
    packed.Pack(CHARGE)
    return gateway_pb2.ExecuteRequest(
        context=gateway_pb2.RunContext(run_id=run_id, step_id=step_id),
        tool="charge_card",
        scope="s",
        payload=packed,
        tool_call_id=f"call-{step_id}",
    )


class GatewayCalls:
    """Execute through the generated stub on one channel (what an agent's client does)."""

    def __init__(self, port: str) -> None:
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self.stub = gateway_pb2_grpc.EffectGatewayStub(self.channel)

    async def execute(self, request: gateway_pb2.ExecuteRequest) -> gateway_pb2.ExecuteResponse:
        response: gateway_pb2.ExecuteResponse = await self.stub.Execute(request, timeout=60)
        return response

    async def close(self) -> None:
        await self.channel.close(grace=None)


class DirectCalls:
    """A keep-alive HTTP POST straight to the provider, with a fresh idempotency key each time,
    on aiohttp: the HTTP library the gateway's Stripe adapter uses (and the fastest of the two the
    SDK offers), so the gateway's overhead is not flattered by a slower baseline client."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http: aiohttp.ClientSession | None = None

    async def charge(self, _: int) -> None:
        if self.http is None:  # created in the running loop, as aiohttp wants
            self.http = aiohttp.ClientSession(
                base_url=self.base_url,
                headers={"Authorization": f"Bearer {API_KEY}"},
                connector=aiohttp.TCPConnector(limit=128),
                timeout=aiohttp.ClientTimeout(total=60),
            )
        async with self.http.post(
            "/v1/payment_intents", data=FORM, headers={"Idempotency-Key": uuid.uuid4().hex}
        ) as answer:
            answer.raise_for_status()
            await answer.read()

    async def close(self) -> None:
        if self.http is not None:
            await self.http.close()
