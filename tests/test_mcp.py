"""`effectgate mcp` with the `mcp` SDK's own client on three transports, the gateway as a real
process, effects counted at the Stripe simulator."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import anyio
import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import RequestParamsMeta
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from effectgate.mcp import META_KEY, run_meta
from effectgate.mcp.catalog import load_catalog
from effectgate.mcp.gateway_port import GatewayPort
from effectgate.mcp.server import FrontDoor, build_server
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.agent_gateway import ACME_TOKEN, GLOBEX_TOKEN, RunningGateway, running_gateway
from tests.mcp_transports import TRANSPORTS, http_front_door, mcp_client

CHARGE: dict[str, Any] = {"customer": "cus_42", "amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"}
META = run_meta("run-mcp-1", "charge-deposit", scope="order:1093", agent="billing")


@pytest.fixture
async def gw(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[RunningGateway]:
    async with running_gateway(tmp_path, sim) as running:
        yield running


def text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_replans_and_paraphrases_with_one_run_context_are_one_effect(gw: RunningGateway, transport: str) -> None:
    async with mcp_client(transport, gw, ACME_TOKEN) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        charge = listed["charge_card"]
        assert charge.input_schema["required"] == ["customer", "amount", "currency", "payment_method"]
        assert charge.input_schema["properties"]["amount"]["type"] == "integer"
        assert charge.output_schema is not None and "action_id" in charge.output_schema["properties"]
        assert charge.annotations is not None
        assert charge.annotations.destructive_hint is True and charge.annotations.idempotent_hint is True

        first = await client.call_tool("charge_card", CHARGE, meta=META)
        assert not first.is_error, text(first)
        assert first.structured_content is not None
        assert first.structured_content["state"] == "CONFIRMED"
        action_id = first.structured_content["action_id"]
        assert first.structured_content["receipt"]["external_id"].startswith("pi_")

        # The model re-plans and paraphrases: the arguments normalise to the same payload.
        paraphrased = {**CHARGE, "currency": "USD", "customer": "  cus_42 "}
        again = await client.call_tool("charge_card", paraphrased, meta=META)
        assert again.structured_content is not None
        assert again.structured_content["action_id"] == action_id
        assert again.structured_content["replayed"] is True

        # A re-plan that rewrote the payload itself is refused: never a second effect.
        rewritten = await client.call_tool("charge_card", {**CHARGE, "amount": 1200}, meta=META)
        assert rewritten.is_error and "PAYLOAD_MISMATCH" in text(rewritten)
        assert "do not retry with other arguments" in text(rewritten).lower()
        # Errors carry structuredContent too: the reason and the action the gateway named.
        assert rewritten.structured_content is not None
        assert rewritten.structured_content["error"]["reason"] == "PAYLOAD_MISMATCH"
        assert rewritten.structured_content["error"]["retry_same_step"] is False
        assert rewritten.structured_content["action_id"] == action_id

    assert len(gw.effects()) == 1
    assert [a.action_id for a in await gw.actions()] == [action_id]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_call_without_run_context_is_refused(gw: RunningGateway, transport: str) -> None:
    async with mcp_client(transport, gw, ACME_TOKEN) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("charge_card", CHARGE)
        assert META_KEY in refused.value.message and "run_id" in refused.value.message
        with pytest.raises(MCPError):
            await client.call_tool(
                "charge_card", CHARGE, meta=cast(RequestParamsMeta, {META_KEY: {"run_id": "run-x"}})
            )  # no step_id
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("refund_everything", CHARGE, meta=META)
        assert "unknown tool" in unknown.value.message
    assert gw.effects() == []
    assert await gw.actions() == []


async def test_invalid_arguments_are_refused_before_the_gateway(gw: RunningGateway) -> None:
    async with mcp_client("inproc", gw, ACME_TOKEN) as client:
        for bad in (
            {**CHARGE, "amount": "ten dollars"},
            {k: v for k, v in CHARGE.items() if k != "payment_method"},
            {**CHARGE, "currency": "dollars"},
            {**CHARGE, "refund": True},
        ):
            result = await client.call_tool("charge_card", bad, meta=META)
            assert result.is_error and "invalid arguments, nothing was sent" in text(result), text(result)
            assert result.structured_content is not None
            assert result.structured_content["error"]["reason"] == "INVALID_ARGUMENTS"
    assert gw.effects() == []
    assert await gw.actions() == []  # the gateway never heard of them


async def test_an_unknown_outcome_is_an_error_with_the_action_id(tmp_path: Path, sim: StripeSimulator) -> None:
    # A half-applied charge that never settles: the gateway cannot prove it, so UNKNOWN.
    sim.settle_seconds = 60
    sim.injector.script(["partial"])
    async with running_gateway(tmp_path, sim, deadline="1s", attempt_timeout="0.5s") as gw:
        async with mcp_client("inproc", gw, ACME_TOKEN) as client:
            result = await client.call_tool("charge_card", CHARGE, meta=META)
            for _ in range(20):  # a loaded machine: past the 1 s deadline the model is told to call again
                assert result.is_error and result.structured_content is not None
                if not result.structured_content.get("error", {}).get("retry_same_step"):
                    break
                await anyio.sleep(0.5)
                result = await client.call_tool("charge_card", CHARGE, meta=META)
            assert result.structured_content is not None
            assert result.structured_content["state"] == "UNKNOWN", result.structured_content
            action_id = result.structured_content["action_id"]
            assert action_id in text(result)
            assert "not proven yet" in text(result) and "do not retry with other arguments" in text(result).lower()
            again = await client.call_tool("charge_card", {**CHARGE, "currency": "USD"}, meta=META)
            assert again.is_error and again.structured_content is not None
            assert again.structured_content["action_id"] == action_id
        assert len(gw.effects()) == 1


async def test_another_tenant_sees_nothing_of_the_first_tenants_actions(gw: RunningGateway) -> None:
    async with mcp_client("http", gw, ACME_TOKEN) as acme:
        first = await acme.call_tool("charge_card", CHARGE, meta=META)
        assert first.structured_content is not None
        acme_action = first.structured_content["action_id"]
    async with mcp_client("http", gw, GLOBEX_TOKEN) as globex:
        peek = await globex.call_tool("effectgate_action_status", {"action_id": acme_action})
        assert peek.is_error and "NOT_FOUND" in text(peek)
        assert acme_action not in str(peek.structured_content or "")
    assert await gw.actions(GLOBEX_TOKEN) == []
    own = await gw.actions(ACME_TOKEN)
    assert [a.action_id for a in own] == [acme_action]
    assert len(gw.effects()) == 1


async def test_http_without_a_valid_token_is_401_with_resource_metadata(gw: RunningGateway) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    async with http_front_door(gw) as url, httpx.AsyncClient() as http:
        for auth in ({}, {"Authorization": "Bearer not-a-known-token"}):
            answer = await http.post(url, json=body, headers={**headers, **auth})
            assert answer.status_code == 401
            challenge = answer.headers["www-authenticate"]
            assert challenge.startswith("Bearer") and "resource_metadata=" in challenge
        metadata_url = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
        metadata = (await http.get(metadata_url)).json()
        assert metadata["resource"] == url
    assert gw.effects() == []


async def test_approval_required_waits_then_confirms_with_one_effect(tmp_path: Path, sim: StripeSimulator) -> None:
    async with (
        running_gateway(tmp_path, sim, approval="required", approval_ttl="10m") as gw,
        mcp_client("inproc", gw, ACME_TOKEN) as client,
    ):
        waiting = await client.call_tool("charge_card", CHARGE, meta=META)
        assert not waiting.is_error and waiting.structured_content is not None
        assert waiting.structured_content["state"] == "AWAITING_APPROVAL"
        assert waiting.structured_content["approval_ttl"] == "10m"
        said = text(waiting)
        assert "waiting for a person" in said and "up to 10m" in said and gw.effects() == []
        assert "Do not retry with other arguments" in said and "effectgate_wait" in said
        action_id = waiting.structured_content["action_id"]
        # The model waits on the gateway: bounded, and the same action when the time runs out.
        idle = await client.call_tool("effectgate_wait", {"action_id": action_id, "seconds": 1})
        assert idle.structured_content is not None and idle.structured_content["state"] == "AWAITING_APPROVAL"
        bad = await client.call_tool("effectgate_wait", {"action_id": action_id, "seconds": 3600})
        assert bad.is_error and bad.structured_content is not None
        assert bad.structured_content["error"]["reason"] == "INVALID_ARGUMENTS"
        async with anyio.create_task_group() as group:
            answers: list[Any] = []

            async def wait() -> None:
                answers.append(await client.call_tool("effectgate_wait", {"action_id": action_id, "seconds": 30}))

            group.start_soon(wait)
            await gw.approve(action_id)
        (decided,) = answers
        assert decided.structured_content is not None and decided.structured_content["state"] == "CONFIRMED"
        done = await client.call_tool("charge_card", CHARGE, meta=META)
        assert done.structured_content is not None
        assert done.structured_content["state"] == "CONFIRMED"
        assert done.structured_content["action_id"] == action_id
        assert len(gw.effects()) == 1


async def test_a_fresh_action_per_request_only_for_harmless_tools_when_allowed(
    tmp_path: Path, sim: StripeSimulator
) -> None:
    fresh = {"allow_fresh_for_harmless": True}
    async with running_gateway(tmp_path, sim, on_repeat="allow", mcp=fresh) as gw:
        async with mcp_client("inproc", gw, ACME_TOKEN) as client:
            (tool,) = [t for t in (await client.list_tools()).tools if t.name == "charge_card"]
            assert tool.annotations is not None and tool.annotations.idempotent_hint is False
            first = await client.call_tool("charge_card", CHARGE)
            second = await client.call_tool("charge_card", CHARGE)
            assert first.structured_content is not None and second.structured_content is not None
            assert first.structured_content["action_id"] != second.structured_content["action_id"]
        assert len(gw.effects()) == 2


async def test_the_fresh_option_never_applies_to_deduplicated_tools(tmp_path: Path, sim: StripeSimulator) -> None:
    async with running_gateway(tmp_path, sim, mcp={"allow_fresh_for_harmless": True}) as gw:
        async with mcp_client("inproc", gw, ACME_TOKEN) as client:
            with pytest.raises(MCPError, match="no run context"):
                await client.call_tool("charge_card", CHARGE)
        assert gw.effects() == []


async def test_traceparent_in_meta_continues_the_callers_trace(gw: RunningGateway) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    meta = run_meta("run-traced", "charge", scope="order:9", traceparent=f"00-{trace_id}-{parent_id}-01")
    gateway = GatewayPort(gw.target)
    front = FrontDoor(load_catalog(gw.config), gateway, static_token=ACME_TOKEN, tracer=provider.get_tracer("t"))
    try:
        async with Client(build_server(front)) as client:
            result = await client.call_tool("charge_card", CHARGE, meta=meta)
    finally:
        await gateway.close()
    assert result.structured_content is not None
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "effectgate.mcp.call_tool"]
    assert span.context is not None and span.parent is not None
    assert format(span.context.trace_id, "032x") == trace_id
    assert format(span.parent.span_id, "016x") == parent_id
    assert span.attributes is not None
    assert span.attributes["effectgate.action_id"] == result.structured_content["action_id"]


async def test_an_unreachable_gateway_is_a_tool_error_that_says_call_again(tmp_path: Path) -> None:
    config = tmp_path / "effectgate.toml"
    config.write_text('[adapters.stripe]\napi_base = "http://127.0.0.1:9"\n[tools.charge_card]\nadapter = "stripe"\n')
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        gateway = GatewayPort(f"127.0.0.1:{port}", timeout=10)
        try:
            async with Client(build_server(FrontDoor(load_catalog(config), gateway))) as client:
                result = await client.call_tool("charge_card", CHARGE, meta=META)
        finally:
            await gateway.close()
    assert result.is_error and "UNAVAILABLE" in text(result) and "same action" in text(result)
