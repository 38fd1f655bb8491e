"""One trace from the agent to the provider, checked at a real OTLP/HTTP receiver: the agent's
span, the Python client's span (`tracing=`) or the MCP front door's span, the gateway's server
span and the provider's HTTP span share one trace id, each the child of the one before."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from opentelemetry import propagate
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from effectgate.client import EffectGateClient, RunContext
from effectgate.mcp import run_meta
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, config_doc, stripe_tools
from tests.otlp_receiver import ChildGateway, OtlpReceiver, wait_for

SERVER = "/effectgate.v1.EffectGateway/Execute"
CARD = ChargeCard(customer="cus_trace", amount=1000, currency="usd", payment_method="pm_card_visa")


@dataclass
class Traced:
    receiver: OtlpReceiver
    sim: StripeSimulator
    target: str
    config: Path


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[Traced]:
    receiver, sim = OtlpReceiver(), StripeSimulator(api_key=API_KEY)
    await receiver.start()
    await sim.start()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "effectgate",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    gateway = ChildGateway(config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url)), tmp_path, env)
    try:
        yield Traced(receiver, sim, await gateway.ready(), tmp_path / "gateway.toml")
    finally:
        assert await gateway.terminate() == 0, "".join(gateway.output)
        await sim.stop()
        await receiver.stop()


@asynccontextmanager
async def agent_tracer(receiver: OtlpReceiver) -> AsyncIterator[TracerProvider]:
    """The agent's own OpenTelemetry SDK (not the global one), exporting to the same receiver.
    Exports leave from the SDK's thread, never from this event loop, which also runs the receiver:
    an export made on the loop blocks the receiver's answer until the exporter times out (10 s)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
    exporter = OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    try:
        yield provider
    finally:
        await asyncio.to_thread(provider.shutdown)  # flushes what is left, the loop free to receive it


def chain(receiver: OtlpReceiver, trace_id: str, names: list[str]) -> list[Span] | None:
    """The spans named `names` in this trace, each the parent of the next, ending at the
    provider's HTTP client span under the gateway's provider span; None until all have arrived."""
    spans = [s for s in receiver.spans if s.trace_id.hex() == trace_id]
    found: list[Span] = []
    for name in names:
        match = [s for s in spans if s.name == name and (not found or s.parent_span_id == found[-1].span_id)]
        if not match:
            return None
        found.append(match[0])
    parents = {s.span_id for s in spans if s.name == "effectgate.provider.execute"}
    http = [s for s in spans if s.kind == Span.SPAN_KIND_CLIENT and s.parent_span_id in parents]
    return [*found, http[0]] if http else None


async def test_python_client_with_tracing_joins_the_agents_trace(traced: Traced) -> None:
    async with agent_tracer(traced.receiver) as provider:
        async with EffectGateClient(traced.target, tracing=provider) as gate:
            with provider.get_tracer("agent").start_as_current_span("agent.charge_deposit") as agent:
                context = RunContext("run-t1", "charge")
                answer = await gate.execute("charge_card", CARD, scope="order:t1", context=context)
        trace_id = format(agent.get_span_context().trace_id, "032x")
    assert answer.action.action_id
    spans = await wait_for(
        lambda: chain(traced.receiver, trace_id, ["agent.charge_deposit", SERVER, SERVER]),
        "agent -> client -> gateway server -> provider HTTP, one trace",
    )
    _agent, client_span, server_span, http_span = spans
    assert client_span.kind == Span.SPAN_KIND_CLIENT and server_span.kind == Span.SPAN_KIND_SERVER
    # The provider received the same trace, its parent the gateway's HTTP client span.
    (received,) = traced.sim.traceparents
    assert received.startswith(f"00-{trace_id}-{http_span.span_id.hex()}-")


async def test_mcp_front_door_span_sits_between_the_host_and_the_gateway(traced: Traced) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "OTEL_EXPORTER_OTLP_ENDPOINT": traced.receiver.endpoint,
        "OTEL_SERVICE_NAME": "effectgate-mcp",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "EFFECTGATE_TOKEN": "",
    }
    front_door = StdioServerParameters(
        command=sys.executable,
        args=["-m", "effectgate.gateway", "mcp", "--config", str(traced.config), "--target", traced.target],
        env=env,
    )
    charge = {"customer": "cus_trace", "amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"}
    async with agent_tracer(traced.receiver) as provider:
        with provider.get_tracer("agent").start_as_current_span("agent.charge_deposit") as agent:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            meta = run_meta("run-t2", "charge", scope="order:t2", traceparent=carrier["traceparent"])
            async with Client(front_door) as mcp:
                result = await mcp.call_tool("charge_card", charge, meta=meta)
        trace_id = format(agent.get_span_context().trace_id, "032x")
    assert result.structured_content is not None and result.structured_content["state"] == "CONFIRMED"
    spans = await wait_for(
        lambda: chain(traced.receiver, trace_id, ["agent.charge_deposit", "effectgate.mcp.call_tool", SERVER]),
        "host -> front door -> gateway server -> provider HTTP, one trace",
    )
    services = {s.span_id: r for r, s in _with_services(traced.receiver)}
    assert [services[s.span_id] for s in spans[:3]] == ["agent", "effectgate-mcp", "effectgate"]


def _with_services(receiver: OtlpReceiver) -> Iterator[tuple[str, Span]]:
    for request in receiver.trace_requests:
        for resource_spans in request.resource_spans:
            service = next(
                kv.value.string_value for kv in resource_spans.resource.attributes if kv.key == "service.name"
            )
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    yield service, span
