"""Event rows edited by hand, met by the reads that answer with events (issue 46): ListEvents
(`effectgate events`) answers a documented refusal naming the row (DATA_LOSS, ErrorInfo
EVENT_ROW_BROKEN), never INTERNAL or a wrong INVALID_ARGUMENT; the notifications' deliverer, which
walks the chain as its outbox, skips the row with a log line and delivers the rest. On SQLite and
a real PostgreSQL."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import start_gateway
from tests.notify_kit import SECRET, Receiver, until, webhook_sink
from tests.store_backends import Backend, SqliteBackend
from tests.test_event_chain import TOKENS, all_events, auth, chained_store, charge, doc, run_cli, tamper

BROKEN_STATE = "'CONFIRMEX'"
BROKEN_DETAIL = "substr(detail, 1, length(detail) - 1) || ']'"


def error_info(exc: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    assert status is not None, exc
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    raise AssertionError(f"no ErrorInfo in {exc}")


@pytest.mark.parametrize(("column", "value", "problem"), [
    ("state", BROKEN_STATE, "state is not a state"),
    ("detail", BROKEN_DETAIL, "detail is not JSON"),
])  # fmt: skip
async def test_list_events_names_a_row_edited_by_hand(
    backend: Backend, sim: StripeSimulator, column: str, value: str, problem: str
) -> None:
    live, events = await chained_store(backend, sim)
    try:
        target = events[2]
        await tamper(backend, (f"UPDATE action_events SET {column} = {value} WHERE seq = ?", (target.event.seq,)))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await all_events(live, "acme")
        assert caught.value.code() == grpc.StatusCode.DATA_LOSS, caught.value
        info = error_info(caught.value)
        assert info.reason == "EVENT_ROW_BROKEN" and info.domain == "effectgate.dev", info
        assert dict(info.metadata) == {
            "tenant": "acme",
            "seq": str(target.event.seq),
            "position": str(target.position),
            "column": column,
            "problem": problem,
        }
        said = caught.value.details() or ""
        assert f"event row {target.event.seq}" in said and "effectgate audit verify" in said, said
        # A filter that passes the row by answers as before; another tenant's trail is untouched.
        assert len(await all_events(live, "acme", principal="nobody")) == 0
        assert len(await all_events(live, "globex")) > 0
    finally:
        await live.close()


async def test_the_events_command_shows_the_refusal(tmp_path: Path, sim: StripeSimulator) -> None:
    """`effectgate events` reads ListEvents: the refusal's reason and row, exit 1, no traceback."""
    backend = SqliteBackend(tmp_path)
    live, events = await chained_store(backend, sim)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_")}
    env |= {"EFFECTGATE_TOKEN": TOKENS[("acme", "operator")], "EFFECTGATE_TARGET": live.target, "LC_ALL": "C.UTF-8"}
    try:
        seq = events[1].event.seq
        await tamper(backend, (f"UPDATE action_events SET state = {BROKEN_STATE} WHERE seq = ?", (seq,)))
        code, out = await run_cli("events", env=env)
        assert code != 0 and "Traceback" not in out, out
        assert "EVENT_ROW_BROKEN" in out and f"event row {seq}" in out and "state is not a state" in out, out
    finally:
        await live.close()


@pytest.mark.timeout(120)
async def test_the_deliverer_skips_a_broken_row_and_delivers_the_rest(
    backend: Backend, sim: StripeSimulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("EG_NOTIFY_SECRET", SECRET)
    caplog.set_level(logging.ERROR, logger="effectgate.notify")
    receiver = await Receiver().start()
    # Another replica holds the deliverer's lease while the events are written and one is edited,
    # so that the deliverer meets the edited row on its first reading of the chain.
    await backend.store()
    far = time.time() + 3600
    held = "INSERT INTO notify_state (name, owner, expires_at) VALUES ('deliverer', 'other', ?)"
    await tamper(backend, (held, (far,)))
    config = doc(backend.url, sim, approval="required")
    config["gateway"]["notify_interval"] = "0.1s"
    config["notify"] = [webhook_sink(receiver.url, events=["approval_waiting"])]
    live = await start_gateway(config)
    try:
        actions = []
        for step in ("a", "b", "c"):
            answer = await live.stub.Execute(charge(step), metadata=auth("acme", "agent"))
            assert answer.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL, answer
            actions.append(answer.action.action_id)
        broken = actions[1]
        await tamper(
            backend,
            (f"UPDATE action_events SET state = {BROKEN_STATE} WHERE action_id = ? AND state = 'AWAITING_APPROVAL'",
             (broken,)),
            ("UPDATE notify_state SET expires_at = 0 WHERE name = 'deliverer'", ()),
        )  # fmt: skip
        await receiver.until(lambda got: len(got) >= 2, "the two readable approval_waiting notifications")
        delivered = {r.json["data"]["action_id"] for r in receiver.received}
        assert delivered == {actions[0], actions[2]}, delivered
        said = await until(
            lambda: [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()],
            "the deliverer's log line naming the row",
        )
        assert "state is not a state" in said[0] and "tenant acme" in said[0], said
        # The job lives on: a later event is delivered too, and no pass failed.
        later = await live.stub.Execute(charge("d"), metadata=auth("acme", "agent"))
        await receiver.until(lambda got: len(got) >= 3, "a notification after the broken row")
        assert receiver.received[2].json["data"]["action_id"] == later.action.action_id
        runner = live.gateway.background
        assert runner.alive("notify") and runner.failures["notify"] == 0, runner.failures
    finally:
        await live.close()
        await receiver.stop()
