"""What callers may send and see, on a real gateway (port 0): size limits on ids and notes,
ListActions pages bounded in bytes, undecodable requests and unknown enum values refused with
INVALID_ARGUMENT (never a traceback), and the observer / operator / agent roles."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import grpc
import pytest

from effectgate.adapters.base import Receipt
from effectgate.gateway.config import ConfigError, parse_config
from effectgate.gateway.model.domain import ActionRecord, State
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import LiveGateway, config_doc, start_gateway, stripe_tools
from tests.test_execute import details, effects, request

LIMIT = 256
TOKENS = {"agent": "tok-agent-1", "operator": "tok-operator-2", "observer": "tok-observer-3"}


def principal(role: str) -> dict[str, Any]:
    digest = hashlib.sha256(TOKENS[role].encode()).hexdigest()
    return {"name": role, "tenant": "acme", "token_sha256": digest, "roles": [role]}


def auth(role: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[role]}"),)


async def live_gateway(tmp_path: Path, sim: StripeSimulator, principals: bool = True) -> LiveGateway:
    doc = config_doc(
        f"sqlite:///{tmp_path}/eg.db",
        principals=[principal(r) for r in TOKENS] if principals else None,
        **stripe_tools(sim.base_url),
    )
    return await start_gateway(doc)


def _oversized(name: str) -> pb.ExecuteRequest:
    req = request()
    long = "R" * (LIMIT + 1)
    if name.startswith("context."):
        setattr(req.context, name.removeprefix("context."), long)
    else:
        setattr(req, name, long)
    return req


FIELDS = ["context.run_id", "context.step_id", "context.agent", "context.parent_run_id", "scope", "tool_call_id"]


@pytest.mark.parametrize("field", FIELDS)
async def test_oversized_ids_are_refused_without_echo(tmp_path: Path, sim: StripeSimulator, field: str) -> None:
    live = await live_gateway(tmp_path, sim)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.Execute(_oversized(field), metadata=auth("agent"))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        violation = details(caught.value)["BadRequest"].field_violations[0]
        assert violation.field == field and f"at most {LIMIT}" in violation.description
        assert "R" * 64 not in (caught.value.details() or "")  # the value is not echoed
        assert effects(sim) == []
        # At the limit it is accepted.
        exact = request(run="r" * LIMIT, step="s" * LIMIT, scope="c" * LIMIT, call="t" * LIMIT)
        done = await live.stub.Execute(exact, metadata=auth("agent"))
        assert done.action.state == pb.EFFECT_STATE_CONFIRMED
    finally:
        await live.close()


async def test_ids_are_measured_in_bytes_not_characters(tmp_path: Path, sim: StripeSimulator) -> None:
    """Fewer characters than the limit but more bytes (UTF-8): refused; the handler encodes the
    ids only when their lengths say one may be too long, which these are."""
    live = await live_gateway(tmp_path, sim)
    try:
        wide = "\u00e9" * (LIMIT // 2 + 1)  # two bytes each
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.Execute(request(scope=wide), metadata=auth("agent"))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        violation = details(caught.value)["BadRequest"].field_violations[0]
        assert violation.field == "scope" and f"is {2 * len(wide)} bytes; at most {LIMIT}" in violation.description
        assert effects(sim) == []
    finally:
        await live.close()


async def test_notes_and_action_ids_have_limits(tmp_path: Path, sim: StripeSimulator) -> None:
    live = await live_gateway(tmp_path, sim)
    try:
        cases: list[Awaitable[Any]] = [
            live.operator.GrantBypass(
                pb.GrantBypassRequest(action_id="act_x", note="n" * 4097), metadata=auth("operator")
            ),
            live.operator.Approve(pb.ApproveRequest(action_id="a" * 300, note="ok"), metadata=auth("operator")),
            live.stub.GetAction(pb.GetActionRequest(action_id="a" * 300), metadata=auth("observer")),
        ]
        for call in cases:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "a" * 100 not in (caught.value.details() or "") and "n" * 100 not in (caught.value.details() or "")
    finally:
        await live.close()


async def test_undecodable_requests_and_unknown_enums(
    tmp_path: Path, sim: StripeSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    live = await live_gateway(tmp_path, sim)
    raw = live.channel.unary_unary("/effectgate.v1.EffectGateway/Execute", None, None)
    garbage = b"\x0a\xff\xff\xff\xff\x0f"  # a length prefix far beyond the message
    try:
        with caplog.at_level(logging.INFO):
            # Anonymous garbage is refused by auth first: nothing is decoded for it.
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await raw(garbage)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await raw(garbage, metadata=auth("agent"))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await live.stub.ListActions(pb.ListActionsRequest(state=99), metadata=auth("observer"))  # type: ignore[arg-type]
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    finally:
        await live.close()


async def test_observer_reads_and_operator_reads_without_the_agent_role(tmp_path: Path, sim: StripeSimulator) -> None:
    live = await live_gateway(tmp_path, sim)
    try:
        done = await live.stub.Execute(request(), metadata=auth("agent"))
        action_id = done.action.action_id
        for reader in ("observer", "operator", "agent"):
            got = await live.stub.GetAction(pb.GetActionRequest(action_id=action_id), metadata=auth(reader))
            assert got.state == pb.EFFECT_STATE_CONFIRMED
            listed = await live.stub.ListActions(pb.ListActionsRequest(), metadata=auth(reader))
            assert [a.action_id for a in listed.actions] == [action_id]
        refused: list[Awaitable[Any]] = [
            live.stub.Execute(request(call="x"), metadata=auth("observer")),
            live.stub.Execute(request(call="y"), metadata=auth("operator")),
            live.stub.Verify(pb.VerifyRequest(action_id=action_id), metadata=auth("observer")),
            live.operator.Approve(pb.ApproveRequest(action_id=action_id), metadata=auth("observer")),
            live.operator.Approve(pb.ApproveRequest(action_id=action_id), metadata=auth("agent")),
        ]
        for call in refused:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert details(caught.value)["ErrorInfo"].reason == "ROLE_REQUIRED"
        verified = await live.stub.Verify(pb.VerifyRequest(action_id=action_id), metadata=auth("operator"))
        assert verified.observation.outcome == pb.OBSERVATION_OUTCOME_CONFIRMED
        assert len(effects(sim)) == 1
    finally:
        await live.close()


def test_duplicate_token_digests_are_a_config_error() -> None:
    twin = {**principal("agent"), "name": "twin", "roles": ["operator"]}
    doc = config_doc("sqlite:///x.db", principals=[principal("agent"), twin], **stripe_tools("http://127.0.0.1:1"))
    with pytest.raises(ConfigError, match=r"\[\[principals\]\] #2 \(twin\) token_sha256: the same token digest"):
        parse_config(doc)


def _maximal(index: int, now: float) -> ActionRecord:
    """A record with every caller-supplied id at the limit and notes of the maximal size."""
    return ActionRecord(
        action_id=f"act_{index:060d}",
        tenant="dev",
        run_id=f"{index:0{LIMIT}d}",
        step_id="s" * LIMIT,
        tool="charge_card",
        scope="c" * LIMIT,
        parent_run_id="p" * LIMIT,
        agent="a" * LIMIT,
        tool_call_id="t" * LIMIT,
        payload_type="effectgate.tools.v1.ChargeCard",
        payload=b"",
        fingerprint="f" * 64,
        state=State.CONFIRMED,
        created_at=now + index / 1000,
        updated_at=now,
        receipt=Receipt(external_id="pi_" + "x" * 60, result={"description": "d" * 2048}),
        notes=tuple(f"note {n}: " + "n" * 4000 for n in range(3)),
    )


async def test_list_pages_stay_under_the_message_limit(tmp_path: Path, sim: StripeSimulator) -> None:
    live = await live_gateway(tmp_path, sim, principals=False)
    try:
        now = time.time()
        for index in range(500):
            await live.gateway.store.insert_if_absent(_maximal(index, now))
        limit = 4 << 20  # what grpc clients accept by default
        seen: list[str] = []
        token, pages = "", 0
        while True:
            page = await live.stub.ListActions(pb.ListActionsRequest(page_size=500, page_token=token))
            assert 0 < page.ByteSize() < limit
            assert page.actions, "every page carries at least one action"
            seen += [a.action_id for a in page.actions]
            pages += 1
            token = page.next_page_token
            if not token:
                break
        assert pages > 1  # 500 maximal records do not fit one message
        assert seen == [f"act_{i:060d}" for i in range(500)]
    finally:
        await live.close()
