"""Traces from `effectgate serve` in a child process, configured only by OTEL_* variables, received
by a real OTLP/HTTP receiver: one Execute's story, and a lost answer settled after a restart."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools
from tests.otlp_receiver import ChildGateway, OtlpReceiver, attrs, wait_for
from tests.test_execute import CHARGE, request


def charge_with(**changes: Any) -> Any:
    charge = type(CHARGE)()
    charge.CopyFrom(CHARGE)
    for name, value in changes.items():
        setattr(charge, name, value)
    return charge


def otel_env(endpoint: str, **more: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "effectgate-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
        **more,
    }


def client_traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def in_trace(receiver: OtlpReceiver, trace_id: str) -> list[Span]:
    return [s for s in receiver.spans if s.trace_id.hex() == trace_id]


def one(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


async def execute(target: str, req: pb.ExecuteRequest, traceparent: str, timeout: float = 10.0) -> pb.ExecuteResponse:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = gateway_pb2_grpc.EffectGatewayStub(channel)
        answer: pb.ExecuteResponse = await stub.Execute(req, metadata=(("traceparent", traceparent),), timeout=timeout)
        return answer


async def test_one_execute_is_one_trace_down_to_the_provider(tmp_path: Path) -> None:
    receiver, sim = OtlpReceiver(), StripeSimulator(api_key="sk_test_effectgate_canary_3f9a1c")
    await receiver.start()
    await sim.start()
    gateway = ChildGateway(
        config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url)), tmp_path, otel_env(receiver.endpoint)
    )
    try:
        target = await gateway.ready()
        traceparent, trace_id, client_span = client_traceparent()
        answer = await execute(target, request(call="call-7"), traceparent)
        assert answer.action.state == pb.EFFECT_STATE_CONFIRMED

        def complete() -> list[Span] | None:
            spans = in_trace(receiver, trace_id)
            names = {s.name for s in spans}
            wanted = {"/effectgate.v1.EffectGateway/Execute", "effectgate.execute", "effectgate.provider.execute"}
            return spans if wanted <= names and any(s.kind == Span.SPAN_KIND_CLIENT for s in spans) else None

        spans = await wait_for(complete, "the Execute trace")
        server = one(spans, "/effectgate.v1.EffectGateway/Execute")
        assert server.kind == Span.SPAN_KIND_SERVER and server.parent_span_id.hex() == client_span
        execute_span = one(spans, "effectgate.execute")
        assert execute_span.parent_span_id == server.span_id
        ex = attrs(execute_span.attributes)
        assert ex["effectgate.action_id"] == answer.action.action_id
        assert ex["effectgate.tool"] == "charge_card" and ex["effectgate.state"] == "CONFIRMED"
        assert ex["effectgate.tool_call_id"] == "call-7" and ex["effectgate.path"] == "new"
        provider = one(spans, "effectgate.provider.execute")
        assert provider.parent_span_id == execute_span.span_id
        pa = attrs(provider.attributes)
        assert pa["effectgate.action_id"] == answer.action.action_id and pa["effectgate.attempt"] == 1
        assert pa["effectgate.adapter"] == "stripe"
        http = [s for s in spans if s.kind == Span.SPAN_KIND_CLIENT]
        assert len(http) == 1 and http[0].parent_span_id == provider.span_id
        # The provider received the gateway's trace: same trace id, the HTTP client span as parent.
        assert sim.traceparents == [f"00-{trace_id}-{http[0].span_id.hex()}-01"]
        assert {"service.name": "effectgate-under-test"}.items() <= receiver.resources()[0].items()
        rpc = attrs(server.attributes)
        assert rpc["rpc.system"] == "grpc" and rpc["rpc.grpc.status_code"] == 0
        assert rpc["rpc.service"] == "effectgate.v1.EffectGateway" and rpc["rpc.method"] == "Execute"

        # A refused call: the same step with another amount. Its server span says how it ended.
        refused_parent, refused_trace, _ = client_traceparent()
        other = charge_with(amount=CHARGE.amount + 1)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await execute(target, request(call="call-8", payload=other), refused_parent)
        code = refused.value.code()

        def refused_span() -> list[Span] | None:
            spans = in_trace(receiver, refused_trace)
            return spans if any(s.name == "/effectgate.v1.EffectGateway/Execute" for s in spans) else None

        denied = one(await wait_for(refused_span, "the refused call's span"), "/effectgate.v1.EffectGateway/Execute")
        assert attrs(denied.attributes)["rpc.grpc.status_code"] == code.value[0] != 0
        assert denied.status.code == denied.status.STATUS_CODE_ERROR and denied.status.message == code.name
    finally:
        await gateway.terminate()
        await sim.stop()
        await receiver.stop()


def lost_answer_tools(base_url: str) -> dict[str, Any]:
    # One provider call per Execute (no same-key retry), a read-back that cannot see the charge
    # for 3 s, a 1 s budget, a provider that stops within 1 s of a closed connection: the Execute
    # ends UNKNOWN, re-checked when the 6 s window closes after that second.
    return stripe_tools(
        base_url, max_attempts=1, consistency_window="6s", deadline="1s", attempt_timeout="0.8s", keeps_processing="1s"
    )


async def test_a_lost_answer_settled_after_a_restart_links_to_its_first_trace(tmp_path: Path) -> None:
    receiver, sim = OtlpReceiver(), StripeSimulator(api_key="sk_test_effectgate_canary_3f9a1c", search_lag=3.0)
    await receiver.start()
    await sim.start()
    sim.injector.script(["drop_after_commit"])
    config = config_doc(f"sqlite:///{tmp_path}/eg.db", **lost_answer_tools(sim.base_url))
    first = ChildGateway(config, tmp_path, otel_env(receiver.endpoint), name="first")
    second: ChildGateway | None = None
    try:
        traceparent, trace_id, _ = client_traceparent()
        answer = await execute(await first.ready(), request(step="lost"), traceparent)
        action_id = answer.action.action_id
        assert answer.action.state == pb.EFFECT_STATE_UNKNOWN
        assert await first.terminate() == 0
        origin = await wait_for(
            lambda: [s for s in in_trace(receiver, trace_id) if s.name == "effectgate.execute"], "the first trace"
        )
        second = ChildGateway(config, tmp_path, otel_env(receiver.endpoint), name="second")
        await second.ready()

        def settled_check() -> list[Span] | None:
            found = [
                s
                for s in receiver.named("effectgate.provider.verify")
                if s.trace_id.hex() != trace_id and attrs(s.attributes).get("effectgate.outcome") == "confirmed"
            ]
            return found or None

        verify = (await wait_for(settled_check, "the reconciler's confirming read-back"))[0]
        va = attrs(verify.attributes)
        assert va["effectgate.action_id"] == action_id and va["effectgate.tool"] == "charge_card"
        assert [(link.trace_id.hex(), link.span_id) for link in verify.links] == [(trace_id, origin[0].span_id)]
        # The re-check's root span ends after its read-back: it may come in a later export batch.
        reconcile = await wait_for(
            lambda: [s for s in receiver.named("effectgate.reconcile") if s.trace_id == verify.trace_id] or None,
            "the re-check's root span",
        )
        assert len(reconcile) == 1 and not reconcile[0].parent_span_id
        ra = attrs(reconcile[0].attributes)
        assert ra["effectgate.action_id"] == action_id and ra["effectgate.reason"] == "recheck"
        assert [link.trace_id.hex() for link in reconcile[0].links] == [trace_id]
        assert len(sim.ledger) == 1  # verified, never re-sent
        # The settled line of the audit log carries the re-check's trace.
        await second.terminate()
        second = None
    finally:
        if second is not None:
            await second.terminate()
        first.kill()
        await sim.stop()
        await receiver.stop()
