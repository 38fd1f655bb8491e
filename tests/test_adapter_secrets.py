"""No configured secret leaves the gateway: not in answers, logs or the database.

A careless provider (the CRM simulator with `echo_credentials`) puts the caller's credential in
every 200 body, every error body and two headers. Through a real gateway on port 0, the secret
must show in no Execute, Verify, GetAction or ListActions answer, no log line (caplog at DEBUG
and a root handler), and no byte of the SQLite file or its WAL.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import struct_pb2

from effectgate.adapters import scrub, scrub_json
from effectgate.client.context import RunContext
from effectgate.v1 import gateway_pb2
from effectgate_lab.simulators.crm_sim import CrmSimulator
from tests.adapter_targets import scenario
from tests.harness import config_doc, start_gateway

SECRET = "sk_live_51Hx9QeLkAbCdEfGhIjKlMnOpQrStUvWxYz0123456789"  # 48+ characters, as real keys
SECRET_ENV = "EG_TEST_ECHOED_SECRET"


def _leaked(text: str | bytes) -> str:
    """The first 12-character piece of the secret found in `text` ("" if none): a cut-off key
    leaks too."""
    data = text.encode() if isinstance(text, str) else text
    for start in range(len(SECRET) - 11):
        piece = SECRET[start : start + 12].encode()
        if piece in data:
            return piece.decode()
    return ""


def test_scrub_runs_before_the_cut() -> None:
    text = "x" * 280 + SECRET + "y" * 100
    assert _leaked(scrub(text, [SECRET])) == ""
    # The JSON-escaped and URL-encoded forms of a secret go too.
    tricky = 'ab/cd+ef"gh'
    assert scrub('{"k": "ab\\/cd+ef\\"gh"} ab%2Fcd%2Bef%22gh', [tricky], limit=None).count("***") == 2
    doc = {"echo": f"Bearer {SECRET}", SECRET: [SECRET, 3]}
    assert scrub_json(doc, [SECRET]) == {"echo": "Bearer ***", "***": ["***", 3]}


@pytest.fixture
def root_log() -> Iterator[io.StringIO]:
    """A DEBUG handler on the root logger (no redaction filter: nothing may log the secret)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield stream
    finally:
        root.removeHandler(handler)


def _customer(customer: str) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update({"customer": customer})
    return out


def _db_bytes(db: Path) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]


async def test_an_echoing_provider_leaks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, root_log: io.StringIO
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    caplog.set_level(logging.DEBUG)
    crm = CrmSimulator(api_key=SECRET, visibility_lag=0.0, echo_credentials=True)
    url = await crm.start()
    db = tmp_path / "effects.db"
    table = scenario("crm_activate") | {"base_url": url, "token_env": SECRET_ENV}
    doc = config_doc(
        f"sqlite:///{db}",
        adapters={"crm": table},
        tools={"activate": {"adapter": "crm", "consistency_window": "0s", "attempt_timeout": "2s", "deadline": "5s"}},
    )
    answers: list[bytes] = []
    live = await start_gateway(doc)
    try:
        ctx = RunContext(run_id="run-echo", step_id="s1", agent="planner")
        # A 200 body and headers that reflect the credential: a receipt.
        ok = await live.client.execute("activate", _customer("cus_echo1"), scope="c:1", context=ctx)
        # An error body that reflects it: a refusal with the provider's text in the reason.
        refused = await live.client.execute(
            "activate", _customer("nosuch-1"), scope="c:2", context=RunContext(run_id="run-echo", step_id="s2")
        )
        # A lost answer: the read-back's 200 body reflects it too, as evidence.
        crm.injector.script(["drop_after_commit"])
        lost = await live.client.execute(
            "activate", _customer("cus_echo2"), scope="c:3", context=RunContext(run_id="run-echo", step_id="s3")
        )
        states = [r.action.state for r in (ok, refused, lost)]
        assert states == [
            gateway_pb2.EFFECT_STATE_CONFIRMED,
            gateway_pb2.EFFECT_STATE_REJECTED,
            gateway_pb2.EFFECT_STATE_CONFIRMED,
        ], [(r.action.state, r.action.reason) for r in (ok, refused, lost)]
        assert "***" in ok.action.receipt.provider_request_id  # the echo happened and was scrubbed
        answers += [r.SerializeToString() for r in (ok, refused, lost)]
        for r in (ok, refused, lost):
            answers.append((await live.client.verify(r.action.action_id)).SerializeToString())
            answers.append((await live.client.get(r.action.action_id)).SerializeToString())
        page = await live.stub.ListActions(gateway_pb2.ListActionsRequest(run_id="run-echo"))
        answers.append(page.SerializeToString())
        on_disk = _db_bytes(db)
    finally:
        await live.close()
        await crm.stop()
    on_disk += _db_bytes(db)

    assert len(crm.ledger) == 2
    for answer in answers:
        assert not _leaked(answer), answer
    for name, data in on_disk:
        assert not _leaked(data), f"{name} holds part of the secret"
    assert caplog.records, "nothing was logged at DEBUG: the check would prove nothing"
    for record in caplog.records:
        assert not _leaked(record.getMessage()), record.getMessage()
    assert not _leaked(caplog.text)
    # URLs carry payload values: the transport's request log (`HTTP Request: POST <url>`) is quiet.
    assert "/customers/cus_echo1" not in caplog.text and "/customers/nosuch-1" not in caplog.text
    assert root_log.getvalue() and not _leaked(root_log.getvalue())
