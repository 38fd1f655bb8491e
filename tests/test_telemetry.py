"""Spans for Execute and each provider call, exported through the real OTel SDK (in memory),
with ids and states as attributes and no secret anywhere."""

from __future__ import annotations

from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from effectgate.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, config_doc, start_gateway, stripe_tools
from tests.test_execute import request

EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)


async def test_execute_is_traced_without_secrets(tmp_path: Path) -> None:
    # The simulator answers 401 with a masked copy of the key it got, so the adapter meets the
    # key in an error: the canary must still appear in no span.
    sim = StripeSimulator(api_key="sk_test_other_key")
    await sim.start()
    live = await start_gateway(config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url)))
    try:
        EXPORTER.clear()
        answer = await live.stub.Execute(request(call="call-77"))
        spans = {s.name: s for s in EXPORTER.get_finished_spans()}
        execute = spans["effectgate.execute"]
        assert execute.attributes is not None
        assert execute.attributes["effectgate.action_id"] == answer.action.action_id
        assert execute.attributes["effectgate.tool_call_id"] == "call-77"
        assert execute.attributes["effectgate.run_id"] == "run-1"
        assert "effectgate.provider.execute" in spans
        dump = repr([(s.name, s.attributes, s.events, s.status.description) for s in EXPORTER.get_finished_spans()])
        assert API_KEY not in dump and API_KEY[-6:] not in dump
        assert API_KEY not in answer.action.reason
    finally:
        await live.close()
        await sim.stop()
