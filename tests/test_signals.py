"""What a gateway tells the people who run it, read where they read it (the Prometheus endpoint and
the JSON log lines of a real `effectgate serve`): refused callers (logged, never the token, and
counted by reason), every RPC counted and timed by method and status code, the approval backlog
and its age, and audit lines that say who, for which run, step, tool and scope."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, config_doc, stripe_tools
from tests.otlp_receiver import ChildGateway
from tests.test_execute import request
from tests.test_telemetry_metrics import by, scrape_until

AGENT, OPERATOR = "signals-agent-token", "signals-operator-token"
WRONG = "wrongtoken-7f3a9c-never-logged"


def principal(name: str, token: str, roles: list[str]) -> dict[str, Any]:
    sha = hashlib.sha256(token.encode()).hexdigest()
    return {"name": name, "tenant": "acme", "token_sha256": sha, "roles": roles}


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def refused(call: Any, message: Any, metadata: Sequence[tuple[str, str]], code: grpc.StatusCode) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(message, metadata=metadata, timeout=10)
    assert caught.value.code() == code


async def test_refusals_rpc_codes_approval_backlog_and_audit_lines(tmp_path: Path) -> None:
    sim = StripeSimulator(api_key=API_KEY)
    await sim.start()
    tools = stripe_tools(sim.base_url)
    tools["tools"]["charge_approved"] = {**tools["tools"]["charge_card"], "approval": "required"}
    principals = [principal("bot", AGENT, ["agent"]), principal("alice", OPERATOR, ["operator"])]
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", principals=principals, **tools)
    doc["telemetry"] = {"prometheus_listen": "127.0.0.1:0", "backlog_interval": "0.2s"}  # announced
    gateway = ChildGateway(doc, tmp_path, {})
    try:
        target = await gateway.ready()
        port = await gateway.metrics_port()
        async with grpc.aio.insecure_channel(target) as channel:
            agent, operator = gateway_pb2_grpc.EffectGatewayStub(channel), gateway_pb2_grpc.OperatorStub(channel)
            unauthenticated = grpc.StatusCode.UNAUTHENTICATED
            await refused(agent.Execute, request(), (), unauthenticated)
            await refused(agent.Execute, request(), (("authorization", f"Basic {WRONG}"),), unauthenticated)
            await refused(agent.Execute, request(), bearer(WRONG), unauthenticated)
            approve = pb.ApproveRequest(action_id="act_x", note="n")
            await refused(operator.Approve, approve, bearer(AGENT), grpc.StatusCode.PERMISSION_DENIED)
            missing = pb.GetActionRequest(action_id="act_missing")
            await refused(agent.GetAction, missing, bearer(AGENT), grpc.StatusCode.NOT_FOUND)
            done = [await agent.Execute(request(step=f"s{n}"), metadata=bearer(AGENT)) for n in range(2)]
            assert all(d.action.state == pb.EFFECT_STATE_CONFIRMED for d in done)
            wait = request(step="wait", scope="order:77")
            wait.tool = "charge_approved"
            waiting = (await agent.Execute(wait, metadata=bearer(AGENT))).action
            assert waiting.state == pb.EFFECT_STATE_AWAITING_APPROVAL

            samples = await scrape_until(
                port, lambda s: by(s, "effectgate_approval_backlog") == {(): 1.0}, "one action awaiting approval"
            )
            assert by(samples, "effectgate_approval_oldest_age_seconds")[()] > 0
            assert by(samples, "effectgate_unknown_backlog") == {(): 0.0}
            assert by(samples, "effectgate_auth_failures_total", "reason", "grpc_method") == {
                ("missing", "Execute"): 1.0,
                ("malformed", "Execute"): 1.0,
                ("unknown_token", "Execute"): 1.0,
                ("role_required", "Approve"): 1.0,
            }
            handled = by(samples, "grpc_server_handled_total", "grpc_service", "grpc_method", "grpc_code", "grpc_type")
            assert handled == {
                ("effectgate.v1.EffectGateway", "Execute", "UNAUTHENTICATED", "unary"): 3.0,
                ("effectgate.v1.Operator", "Approve", "PERMISSION_DENIED", "unary"): 1.0,
                ("effectgate.v1.EffectGateway", "GetAction", "NOT_FOUND", "unary"): 1.0,
                ("effectgate.v1.EffectGateway", "Execute", "OK", "unary"): 3.0,
            }
            timed = by(samples, "rpc_server_duration_seconds_count", "rpc_method", "rpc_grpc_status_code")
            assert timed == {
                ("Execute", "16"): 3.0,
                ("Approve", "7"): 1.0,
                ("GetAction", "5"): 1.0,
                ("Execute", "0"): 3.0,
            }

            await operator.Approve(pb.ApproveRequest(action_id=waiting.action_id, note="ok"), metadata=bearer(OPERATOR))
            samples = await scrape_until(port, lambda s: by(s, "effectgate_approval_backlog") == {(): 0.0}, "no wait")
            assert by(samples, "effectgate_approval_oldest_age_seconds") == {(): 0.0}
    finally:
        await gateway.terminate()
        await sim.stop()

    text = "".join(gateway.output)
    assert WRONG not in text and WRONG[:8] not in text  # not the token, not even a prefix
    lines = [json.loads(line) for line in gateway.output if line.startswith("{")]
    failures = [line for line in lines if line.get("event") == "auth_failed"]
    assert [(f["cause"], f["method"], f["principal"]) for f in failures] == [
        ("missing", "/effectgate.v1.EffectGateway/Execute", ""),
        ("malformed", "/effectgate.v1.EffectGateway/Execute", ""),
        ("unknown_token", "/effectgate.v1.EffectGateway/Execute", ""),
        ("role_required", "/effectgate.v1.Operator/Approve", "bot"),
    ]
    assert all(f["peer"].startswith("ipv4:127.0.0.1:") and f["severity_text"] == "WARNING" for f in failures)
    settled = {line["action_id"]: line for line in lines if line.get("event") == "action_settled"}
    first = settled[done[0].action.action_id]
    assert (first["principal"], first["tenant"], first["run_id"], first["step_id"], first["tool"]) == (
        "bot", "acme", "run-1", "s0", "charge_card",
    )  # fmt: skip
    assert first["scope_sha256"] == hashlib.sha256(b"order:1093").hexdigest()[:16]
    assert "order:1093" not in text  # the scope itself stays out of the log
    (act,) = [line for line in lines if line.get("event") == "operator_act"]
    assert (act["act"], act["principal"], act["operator"], act["step_id"]) == ("approve", "alice", "alice", "wait")
