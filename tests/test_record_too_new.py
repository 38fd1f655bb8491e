"""A record stored by a newer gateway (issue 46: a rolling upgrade; its `schema_version` is above
`codec.SCHEMA_VERSION`), met by this one through every door that reads it: each RPC answers
FAILED_PRECONDITION with ErrorInfo RECORD_VERSION_TOO_NEW naming both versions (it was INTERNAL,
'internal error; see the gateway log'), on SQLite and PostgreSQL; the operator CLI prints it with
what to do, and the console says so on the action's page, the list and a decision."""

from __future__ import annotations

import asyncio
import html
import re
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import duration_pb2

from effectgate.gateway.model import State
from effectgate.gateway.store import codec, encode_cursor
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.console_kit import TOKENS as CONSOLE_TOKENS
from tests.console_kit import stack
from tests.harness import LiveGateway, start_gateway
from tests.store_backends import Backend, record
from tests.test_console import card, execute
from tests.test_event_chain import TOKENS, auth, charge, doc, tamper
from tests.test_execute import details
from tests.test_operator_cli import _in_process

READABLE = str(codec.SCHEMA_VERSION)
NEWER = str(codec.SCHEMA_VERSION + 1)
RAISED = (
    "UPDATE actions SET body = replace(body, ?, ?) WHERE action_id = ?",
    (f'"schema_version":{READABLE}', f'"schema_version":{NEWER}'),
)


def stored_by_a_newer_gateway(action_id: str) -> tuple[str, tuple[Any, ...]]:
    """The statement that makes `action_id`'s record one a newer release wrote (its version + 1)."""
    return RAISED[0], (*RAISED[1], action_id)


def assert_refused(error: grpc.aio.AioRpcError, action_id: str, said: str) -> None:
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, f"{said}: {error.code()} {error.details()}"
    info = details(error)["ErrorInfo"]
    assert info.reason == "RECORD_VERSION_TOO_NEW", said
    assert dict(info.metadata) == {"action_id": action_id, "stored_version": NEWER, "readable_version": READABLE}
    assert f"record schema version {NEWER}" in (error.details() or "") and "internal" not in (error.details() or "")


def every_reading_rpc(live: LiveGateway, action_id: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    agent, operator = auth("acme", "agent"), auth("acme", "operator")
    one = duration_pb2.Duration(seconds=1)

    async def watch() -> Any:
        """A watch resumed from before the action: its cursor first, then the changes (refused)."""
        call = live.stub.WatchActions(pb.WatchActionsRequest(cursor=encode_cursor(1.0, "")), metadata=operator)
        while True:
            message = await call.read()
            if not isinstance(message, pb.WatchActionsResponse) or message.HasField("action"):  # EOF, or the action
                call.cancel()
                return message

    return {
        "Execute (the same call again)": lambda: live.stub.Execute(charge("a"), metadata=agent),
        "Verify": lambda: live.stub.Verify(pb.VerifyRequest(action_id=action_id), metadata=agent),
        "GetAction": lambda: live.stub.GetAction(pb.GetActionRequest(action_id=action_id), metadata=operator),
        "ListActions": lambda: live.stub.ListActions(pb.ListActionsRequest(), metadata=operator),
        "WaitAction": lambda: live.stub.WaitAction(
            pb.WaitActionRequest(action_id=action_id, timeout=one), metadata=operator
        ),
        "GetActionHistory": lambda: live.stub.GetActionHistory(
            pb.GetActionHistoryRequest(action_id=action_id), metadata=operator
        ),
        "WatchActions": watch,
        "Approve": lambda: live.operator.Approve(pb.ApproveRequest(action_id=action_id), metadata=operator),
        "Deny": lambda: live.operator.Deny(pb.DenyRequest(action_id=action_id, note="no"), metadata=operator),
        "Reconcile": lambda: live.operator.Reconcile(
            pb.ReconcileRequest(action_id=action_id, resolution=pb.EFFECT_STATE_NOT_FOUND, note="checked"),
            metadata=operator,
        ),
        "GrantBypass": lambda: live.operator.GrantBypass(
            pb.GrantBypassRequest(action_id=action_id, note="once"), metadata=operator
        ),
        "GrantLimit": lambda: live.operator.GrantLimit(
            pb.GrantLimitRequest(action_id=action_id, note="once"), metadata=operator
        ),
    }


async def test_every_rpc_that_reads_a_newer_record_refuses_it(backend: Backend, sim: StripeSimulator) -> None:
    config = doc(backend.url, sim, limits={"budget": {"usd": 100000}, "window": "1h"})
    newer = await start_gateway(config)  # stands in for the replica of the newer release
    try:
        first = await newer.stub.Execute(charge("a"), metadata=auth("acme", "agent"))
    finally:
        await newer.close()
    assert first.action.state == pb.EFFECT_STATE_CONFIRMED
    action_id = first.action.action_id
    await tamper(backend, stored_by_a_newer_gateway(action_id))
    live = await start_gateway(config)  # this release's replica, which never saw the action
    try:
        for name, call in every_reading_rpc(live, action_id).items():
            try:
                answer = await asyncio.wait_for(call(), 30)
            except grpc.aio.AioRpcError as error:
                assert_refused(error, action_id, name)
            else:
                raise AssertionError(f"{name} answered {answer}")
        # Nothing was changed by the refused calls: no effect sent again, the record as stored.
        assert len(sim.intents) == 1
        # The rest of the tenant still works: a new action is served beside the unreadable one.
        other = await live.stub.Execute(charge("b"), metadata=auth("acme", "agent"))
        assert other.action.state == pb.EFFECT_STATE_CONFIRMED
    finally:
        await live.close()


async def test_the_cli_names_the_case_and_what_to_do(tmp_path: Path, sim: StripeSimulator) -> None:
    url = f"sqlite:///{tmp_path}/eg.db"
    live = await start_gateway(doc(url, sim))
    try:
        first = await live.stub.Execute(charge("a"), metadata=auth("acme", "agent"))
        action_id = first.action.action_id
        conn = sqlite3.connect(tmp_path / "eg.db")
        conn.execute(*stored_by_a_newer_gateway(action_id))
        conn.commit()
        conn.close()
        env = {"EFFECTGATE_TOKEN": TOKENS[("acme", "operator")], "EFFECTGATE_TARGET": live.target, "LC_ALL": "C.UTF-8"}
        commands = [("show", action_id), ("describe", action_id), ("actions",), ("verify", action_id)]
        commands += [("approve", action_id, "--note", "ok"), ("deny", action_id, "--note", "no")]
        for args in commands:
            code, out, err = await asyncio.wait_for(asyncio.to_thread(_in_process, args, env), 60)
            assert code != 0 and "Traceback" not in err, (args, code, out, err)
            assert "FAILED_PRECONDITION (RECORD_VERSION_TOO_NEW)" in err, (args, err)
            assert f"record version {NEWER}" in err and f"reads up to {READABLE}" in err, (args, err)
            assert "INTERNAL" not in err, (args, err)
    finally:
        await live.close()


def csrf(page: httpx.Response) -> str:
    found = re.search(r'name="csrftoken" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


async def test_the_console_says_a_newer_release_stored_the_action(tmp_path: Path) -> None:
    async with stack(tmp_path) as eg:
        waiting = await execute(eg.agent, "run-newer", card("cus_new", 1200))  # charge_card waits for approval
        assert waiting.state == pb.EFFECT_STATE_AWAITING_APPROVAL
        conn = sqlite3.connect(tmp_path / "eg.db")
        conn.execute(*stored_by_a_newer_gateway(waiting.action_id))
        conn.commit()
        conn.close()
        mine = {"Origin": eg.console}
        async with httpx.AsyncClient(base_url=eg.console, timeout=30) as web:
            login = await web.get("/login")
            signed = await web.post(
                "/login", data={"token": CONSOLE_TOKENS["alice"], "csrftoken": csrf(login)}, headers=mine
            )
            assert signed.status_code == 303
            pages = [await web.get(path) for path in (f"/actions/{waiting.action_id}", "/actions", "/inbox")]
            token = csrf(await web.get("/audit"))
            pages.append(
                await web.post(
                    f"/actions/{waiting.action_id}/deny", data={"note": "no", "csrftoken": token}, headers=mine
                )
            )
        for page in pages:
            said = f"{page.request.method} {page.request.url}: {page.status_code}"
            assert page.status_code == 409, said
            text = html.unescape(page.text)
            assert "Stored by a newer gateway release" in text and "RECORD_VERSION_TOO_NEW" in text, said
            assert f"record version {NEWER}; this gateway reads up to {READABLE}" in text, said
        assert not eg.sim.intents  # nothing was approved, denied or sent


async def test_a_reconciler_skips_a_newer_record_and_drives_the_rest(backend: Backend) -> None:
    """An older replica's reconciler claims due work in batches: a record a newer gateway wrote is
    left out (its claim lapses with its lease; a newer replica drives it) instead of failing the
    whole batch, which had held every other claimed action's lease with nothing done."""
    store = await backend.store()
    now = 10_000.0
    due = [record(name, state=State.UNKNOWN, next_check_at=now - 1) for name in ("older", "newer", "later")]
    await store.insert_many(due)
    await tamper(backend, stored_by_a_newer_gateway("newer"))
    claimed = await store.claim_due("old-replica", now, 30.0, 10)
    assert sorted(r.action_id for r in claimed) == ["later", "older"]
    with pytest.raises(codec.SchemaVersionError):
        await store.get("newer")


async def test_the_approvals_expiry_skips_a_newer_record(backend: Backend) -> None:
    """The expiry's batch of waiting actions: a newer gateway's record is left to it, the rest
    are still found (the whole batch failed, pass after pass)."""
    store = await backend.store()
    waiting = [record(name, state=State.AWAITING_APPROVAL, created_at=100.0) for name in ("first", "newer", "last")]
    await store.insert_many(waiting)
    await tamper(backend, stored_by_a_newer_gateway("newer"))
    found = await store.awaiting("payments.charge", 200.0, 10)
    assert sorted(r.action_id for r in found) == ["first", "last"]
