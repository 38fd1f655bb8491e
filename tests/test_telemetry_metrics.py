"""Metrics and the audit log of a scripted run, read where operators read them: the Prometheus
text endpoint, the OTLP receiver, and the JSON lines on the gateway's stderr."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools
from tests.otlp_receiver import ChildGateway, OtlpReceiver, attrs, wait_for
from tests.test_execute import request
from tests.test_telemetry import client_traceparent, execute, otel_env

Labels = frozenset[tuple[str, str]]


Samples = dict[str, dict[Labels, float]]


async def scrape(port: int) -> Samples:
    """sample name -> {labels without the OTel scope labels: value}."""
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = frozenset((k, v) for k, v in sample.labels.items() if not k.startswith("otel_scope"))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


async def scrape_until(port: int, check: Callable[[Samples], bool], what: str, timeout: float = 60.0) -> Samples:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        samples = await scrape(port)
        if check(samples):
            return samples
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}; last scrape: {samples}")
        await asyncio.sleep(0.1)


def by(samples: Samples, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """One sample family keyed by the values of `keys` (summed over the other labels)."""
    out: dict[tuple[str, ...], float] = {}
    for labels, value in samples.get(name, {}).items():
        key = tuple(dict(labels).get(k, "") for k in keys)
        out[key] = out.get(key, 0.0) + value
    return out


def otlp_sums(receiver: OtlpReceiver, name: str) -> dict[frozenset[tuple[str, Any]], float]:
    """The last cumulative value of each point of a Sum metric received over OTLP."""
    latest: dict[frozenset[tuple[str, Any]], float] = {}
    for req in receiver.metric_requests:
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        for point in metric.sum.data_points:
                            latest[frozenset(attrs(point.attributes).items())] = point.as_double or point.as_int
    return latest


def audit_lines(lines: Iterable[str]) -> list[dict[str, Any]]:
    docs = [json.loads(line) for line in lines if line.startswith("{")]
    return [doc for doc in docs if doc.get("scope.name") == "effectgate.audit"]


async def test_a_scripted_run_is_counted_exactly(tmp_path: Path) -> None:
    receiver, sim = OtlpReceiver(), StripeSimulator(api_key="sk_test_effectgate_canary_3f9a1c", search_lag=60.0)
    await receiver.start()
    await sim.start()
    # One provider call per Execute, a 1 s budget and a read-back that cannot see a lost charge
    # for a minute: a dropped answer leaves the action UNKNOWN for the whole test.
    doc = config_doc(
        f"sqlite:///{tmp_path}/eg.db",
        **stripe_tools(sim.base_url, max_attempts=1, consistency_window="60s", deadline="1s", attempt_timeout="0.8s"),
    )
    doc["telemetry"] = {"prometheus_listen": "127.0.0.1:0", "backlog_interval": "0.2s"}  # announced
    gateway = ChildGateway(doc, tmp_path, otel_env(receiver.endpoint))
    try:
        target = await gateway.ready()
        port = await gateway.metrics_port()
        trace_ids = {}
        for n in range(5):
            traceparent, trace_ids[f"s{n}"], _ = client_traceparent()
            answer = await execute(target, request(step=f"s{n}"), traceparent)
            assert answer.action.state == pb.EFFECT_STATE_CONFIRMED
        for n in range(2):
            assert (await execute(target, request(step=f"s{n}"), client_traceparent()[0])).replayed
        sim.injector.script(["drop_after_commit"])
        lost = await execute(target, request(step="lost"), client_traceparent()[0])
        assert lost.action.state == pb.EFFECT_STATE_UNKNOWN

        samples = await scrape_until(port, lambda s: by(s, "effectgate_unknown_backlog") == {(): 1.0}, "backlog 1")
        assert by(samples, "effectgate_actions_total", "outcome") == {
            ("confirmed",): 5.0,
            ("replayed",): 2.0,
            ("unknown",): 1.0,
        }
        assert by(samples, "effectgate_execute_duration_seconds_count", "path") == {("new",): 6.0, ("replay",): 2.0}
        calls = by(samples, "effectgate_provider_duration_seconds_count", "operation", "class")
        assert calls[("execute", "ok")] == 5.0 and calls[("execute", "ambiguous")] == 1.0
        checks = calls[("verify", "ok")]
        assert checks >= 1 and set(calls) == {("execute", "ok"), ("execute", "ambiguous"), ("verify", "ok")}
        assert by(samples, "effectgate_provider_errors_total", "adapter", "operation", "class") == {
            ("stripe", "execute", "ambiguous"): 1.0
        }
        assert by(samples, "effectgate_verifications_total", "outcome") == {("not_found",): checks}
        assert by(samples, "effectgate_unknown_oldest_age_seconds")[()] > 0
        for absent in ("effectgate_reconciler_claims_total", "effectgate_lease_takeovers_total"):
            assert absent not in samples  # nothing was due, nobody died
        assert "effectgate_store_errors_total" not in samples

        # An operator settles the UNKNOWN one: the act is counted, logged and the backlog empties.
        async with grpc.aio.insecure_channel(target) as channel:
            operator = gateway_pb2_grpc.OperatorStub(channel)
            await operator.Reconcile(
                pb.ReconcileRequest(
                    action_id=lost.action.action_id,
                    resolution=pb.EFFECT_STATE_CONFIRMED,
                    note="seen in the dashboard",
                    external_id=sim.ledger[-1]["id"],
                ),
                timeout=10,
            )
        samples = await scrape_until(port, lambda s: by(s, "effectgate_unknown_backlog") == {(): 0.0}, "backlog 0")
        assert by(samples, "effectgate_operator_acts_total", "act") == {("reconcile",): 1.0}

        # The same counts reach the OTLP receiver.
        def otlp_counts() -> dict[str, float] | None:
            points = otlp_sums(receiver, "effectgate.actions")
            counts = {dict(k)["outcome"]: v for k, v in points.items()}
            return counts if counts == {"confirmed": 5, "replayed": 2, "unknown": 1} else None

        await wait_for(otlp_counts, "the OTLP metric export")
    finally:
        await gateway.terminate()
        await sim.stop()
        await receiver.stop()

    # The audit trail: one line per settled action, one per operator act, each with its trace.
    lines = audit_lines(gateway.output)
    settled = [d for d in lines if d["event"] == "action_settled"]
    assert sorted(d["state"] for d in settled) == ["CONFIRMED"] * 5 + ["UNKNOWN"]
    first = next(d for d in settled if d["action_id"] != lost.action.action_id and d["trace_id"] == trace_ids["s0"])
    assert first["tool"] == "charge_card" and first["attempts"] == 1 and len(first["span_id"]) == 16
    (act,) = [d for d in lines if d["event"] == "operator_act"]
    assert act["act"] == "reconcile" and act["operator"] == "dev" and act["note"] == "seen in the dashboard"
    assert act["action_id"] == lost.action.action_id and act["state"] == "CONFIRMED" and act["trace_id"]
    spans = {s.span_id.hex(): s for s in receiver.spans}
    rpc = spans[act["span_id"]]
    assert rpc.name == "/effectgate.v1.Operator/Reconcile"
    assert attrs(rpc.attributes)["effectgate.action_id"] == lost.action.action_id
    assert len(rpc.links) == 1  # to the Execute that created the action


async def test_a_crashed_workers_action_is_taken_over_counted_and_linked(tmp_path: Path) -> None:
    receiver, sim = OtlpReceiver(), StripeSimulator(api_key="sk_test_effectgate_canary_3f9a1c")
    await receiver.start()
    await sim.start()
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url))
    doc["telemetry"] = {"prometheus_listen": "127.0.0.1:0"}  # the port it binds is announced
    # The first gateway SIGKILLs itself once the charge went out, before it recorded the answer.
    env = otel_env(receiver.endpoint)
    doomed = ChildGateway(doc, tmp_path, {**env, "EFFECTGATE_CRASH_AT": "after_provider_commit"}, name="doomed")
    successor: ChildGateway | None = None
    try:
        traceparent, trace_id, _ = client_traceparent()
        with pytest.raises(grpc.aio.AioRpcError):
            await execute(await doomed.ready(), request(step="crash"), traceparent)
        assert doomed.proc.wait(30) != 0
        successor = ChildGateway(doc, tmp_path, env, name="successor")
        await successor.ready()
        port = await successor.metrics_port()
        samples = await scrape_until(
            port,
            lambda s: by(s, "effectgate_verifications_total", "outcome") == {("confirmed",): 1.0},
            "the successor's read-back",
        )
        assert by(samples, "effectgate_reconciler_claims_total", "reason") == {("abandoned",): 1.0}
        assert by(samples, "effectgate_lease_takeovers_total", "tool", "site") == {("charge_card", "reconciler"): 1.0}
        assert by(samples, "effectgate_reconciler_lag_seconds_count", "reason") == {("abandoned",): 1.0}
        assert "effectgate_actions_total" not in samples  # no agent asked the successor anything
        assert len(sim.ledger) == 1  # verified, not re-sent

        def linked_reconcile() -> list[Any] | None:
            found = [s for s in receiver.named("effectgate.reconcile") if s.links]
            return found or None

        (span,) = await wait_for(linked_reconcile, "the successor's re-check span")
        assert attrs(span.attributes)["effectgate.reason"] == "abandoned"
        assert attrs(span.attributes)["effectgate.state"] == "CONFIRMED"
        assert [link.trace_id.hex() for link in span.links] == [trace_id]
    finally:
        doomed.kill()
        if successor is not None:
            await successor.terminate()
        await sim.stop()
        await receiver.stop()


async def test_a_duplicate_that_waits_for_the_holder_is_counted_as_waited(tmp_path: Path) -> None:
    sim = StripeSimulator(api_key="sk_test_effectgate_canary_3f9a1c", latency=1.5)
    await sim.start()
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url, attempt_timeout="2.5s"))
    doc["telemetry"] = {"prometheus_listen": "127.0.0.1:0"}  # the port it binds is announced
    gateway = ChildGateway(doc, tmp_path, {})
    try:
        target = await gateway.ready()
        port = await gateway.metrics_port()
        # Two at once: whichever claims the action first holds it for the provider's 1.5 s; the
        # other finds it in flight and waits for that holder (single flight).
        answers = await asyncio.gather(
            *(execute(target, request(step="twice"), client_traceparent()[0]) for _ in range(2))
        )
        assert answers[0].action.action_id == answers[1].action.action_id
        assert sorted(a.replayed for a in answers) == [False, True]
        samples = await scrape_until(
            port, lambda s: sum(by(s, "effectgate_actions_total").values()) == 2, "both answers counted"
        )
        assert by(samples, "effectgate_execute_duration_seconds_count", "path") == {("new",): 1.0, ("waited",): 1.0}
        assert by(samples, "effectgate_actions_total", "outcome") == {("confirmed",): 1.0, ("replayed",): 1.0}
        assert len(sim.ledger) == 1
    finally:
        await gateway.terminate()
        await sim.stop()
