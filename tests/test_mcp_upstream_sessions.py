"""Every way an upstream MCP session ends, met by the `mcp` adapter: a 404 for its session id (a
server that restarted, a session it expired or forgot), a transport closed mid-call. The adapter
opens a new session and classifies the call by what it knows: refused before any tool ran (the
404) is sent once more on the new session, or is "nothing was sent"; anything after the request
may have reached the tool is ambiguous and goes to read-back. Never a definitive refusal.

Against the lab's simulators (lab/…/mcp_upstream): streamable HTTP on loopback in this process,
stdio children; the effects are counted in the upstream's own ledger.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from effectgate.adapters.base import AdapterError, AmbiguousError, DefinitiveError, NoEffectError, Outcome, Receipt
from effectgate.adapters.mcp import McpAdapter
from effectgate.adapters.testing import new_call
from tests.mcp_upstream_targets import McpTarget, start_target

# The tools the gateway's key reaches in three ways: an argument, the request's _meta, nowhere.
KEYINGS = ["keyed", "meta-keyed", "no-key"]


def _changes(keying: str) -> dict[str, Any]:
    if keying == "meta-keyed":
        # The simulator's mail server reads no _meta: the read finds the message by its recipient.
        return {
            "key_argument": "",
            "key_meta": "io.example/idempotency-key",
            "verify": {"tool": "list_messages", "arguments": {"to": "{to}"}, "receipt_id": "result.messages[0].id"},
            "match": "result.messages.exists(m, m.to == payload.to && m.body == payload.body)",
        }
    return {}


@asynccontextmanager
async def adapter_for(
    name: str, tmp_path: Path, keying: str = "keyed", **extra: Any
) -> AsyncIterator[tuple[McpTarget, McpAdapter]]:
    if keying == "no-key":
        name = name.replace("mail", "tracker")
    target = await start_target(name, tmp_path)
    settings = target.settings(**_changes(keying), **extra)
    if target.http is None:
        settings["command"] = [*settings["command"], "--pid-file", str(tmp_path / "server.pid")]
    adapter = McpAdapter.from_settings(target.name, settings)
    try:
        yield target, adapter
    finally:
        await adapter.close()
        await target.stop()


async def test_a_keyed_resend_after_a_restart_answers_the_effect_it_made(tmp_path: Path) -> None:
    """The issue's sequence: the first call applies and its answer is lost, the server restarts
    (forgetting the session), the gateway sends again with the same key. Before the fix the 404
    for the session id was a definitive refusal: REJECTED while the message had been sent."""
    async with adapter_for("mail-http", tmp_path) as (target, adapter):
        assert target.http is not None
        call = new_call(adapter, target.good_payload("restart-1"))
        target.inject("slow")  # applied, answered after the adapter's timeout
        with pytest.raises(AmbiguousError):
            await adapter.execute(call)
        await target.http.restart()
        receipt = await adapter.execute(call)
        assert isinstance(receipt, Receipt)
        assert len(target.ledger.effects()) == 1
        obs = await adapter.verify(call)
        assert obs.outcome is Outcome.CONFIRMED, obs.detail
        # It says who it is (not the SDK's "mcp"): servers log and allow-list clients by name.
        assert target.http.upstream.clients == {("effectgate", version("effectgate"))}


@pytest.mark.parametrize("keying", KEYINGS)
@pytest.mark.parametrize("ending", ["restart", "forgotten", "expired"])
async def test_a_new_write_after_the_session_ended_is_sent_once(keying: str, ending: str, tmp_path: Path) -> None:
    async with adapter_for("mail-http", tmp_path, keying) as (target, adapter):
        sim = target.http
        assert sim is not None
        first = new_call(adapter, target.good_payload(f"{ending}-1"))
        await adapter.execute(first)
        await _end_sessions(target, ending)
        second = new_call(adapter, target.good_payload(f"{ending}-2"))
        await adapter.execute(second)
        assert len(target.ledger.effects()) == 2
        opened, forgotten = adapter.sessions
        assert (opened, forgotten) == (2, 1), adapter.sessions
        for call in (first, second):
            assert (await adapter.verify(call)).outcome is Outcome.CONFIRMED


async def _end_sessions(target: McpTarget, ending: str) -> None:
    sim = target.http
    assert sim is not None
    if ending == "restart":
        await sim.restart()
    elif ending == "forgotten":
        assert sim.forget_sessions() >= 1
    else:
        # A session older than its time to live answers 404 from the next request that names it:
        # the simulator's clock moves an hour on (the new session is born in that hour).
        sim.session_ttl = 60.0
        sim.clock = lambda: time.monotonic() + 3600.0


async def _until(check: Any, what: str, within: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not check():
        assert loop.time() < end, f"not within {within:g}s: {what}"
        await asyncio.sleep(0.05)


def _no_definitive(exc: BaseException) -> None:
    assert not isinstance(exc, DefinitiveError), exc
    assert isinstance(exc, AmbiguousError | NoEffectError), exc


@pytest.mark.parametrize("keying", KEYINGS)
async def test_reads_reopen_the_session_and_prove_the_effect(keying: str, tmp_path: Path) -> None:
    # Reads down (the session forgotten), then back: the read opens a new session and proves it.
    async with adapter_for("mail-http", tmp_path, keying) as (target, adapter):
        assert target.http is not None
        call = new_call(adapter, target.good_payload("read-1"))
        target.inject("drop_after_commit")
        with pytest.raises(AmbiguousError):
            await adapter.execute(call)
        await adapter.verify(new_call(adapter, target.good_payload("warm")))  # a session to forget
        assert target.http.forget_sessions() >= 1
        obs = await adapter.verify(call)
        assert obs.outcome is Outcome.CONFIRMED, obs.detail
        assert len(target.ledger.effects()) == 1


@pytest.mark.parametrize("keying", KEYINGS)
async def test_a_stdio_server_that_exits_between_calls_or_mid_call(keying: str, tmp_path: Path) -> None:
    async with adapter_for("mail-stdio", tmp_path, keying) as (target, adapter):
        await adapter.execute(new_call(adapter, target.good_payload("stdio-1")))
        # Killed between calls: the next call finds the transport ended and starts a fresh server.
        os.kill(int((tmp_path / "server.pid").read_text()), signal.SIGKILL)
        await _until(lambda: not adapter.connected, "the adapter saw its server exit")
        await adapter.execute(new_call(adapter, target.good_payload("stdio-2")))
        # Exiting mid-call, after the effect: ambiguous, and the read (a fresh server) proves it.
        lost = new_call(adapter, target.good_payload("stdio-3"))
        target.inject("drop_after_commit")
        with pytest.raises(AmbiguousError):
            await adapter.execute(lost)
        assert (await adapter.verify(lost)).outcome is Outcome.CONFIRMED
        assert len(target.ledger.effects()) == 3
        assert adapter.sessions == (3, 0)


# -- attacks on the door --


async def test_concurrent_calls_during_a_reopen_share_one_new_session(tmp_path: Path) -> None:
    # Ten calls at once on a loaded machine: a timeout no answer outlasts.
    async with adapter_for("mail-http", tmp_path, "no-key", timeout=60.0) as (target, adapter):
        assert target.http is not None
        await adapter.execute(new_call(adapter, target.good_payload("c-0")))
        target.http.forget_sessions()
        calls = [new_call(adapter, target.good_payload(f"c-{i}")) for i in range(1, 11)]
        receipts = await asyncio.gather(*(adapter.execute(c) for c in calls))
        assert all(isinstance(r, Receipt) for r in receipts)
        assert len(target.ledger.effects()) == 11
        assert adapter.sessions == (2, 1), adapter.sessions
        assert len(target.http.sessions()) == 1


async def test_a_404_that_is_not_about_the_session_is_ambiguous(tmp_path: Path) -> None:
    # Applied, then answered 404 with an internal error (a proxy, a careless server): no proof
    # that no tool ran, so never "no effect" and never a refusal; the read decides.
    async with adapter_for("mail-http", tmp_path, "no-key") as (target, adapter):
        call = new_call(adapter, target.good_payload("m-1"))
        target.inject("misrouted_404")
        with pytest.raises(AdapterError) as caught:
            await adapter.execute(call)
        _no_definitive(caught.value)
        assert isinstance(caught.value, AmbiguousError), caught.value
        assert (await adapter.verify(call)).outcome is Outcome.CONFIRMED
        await adapter.execute(new_call(adapter, target.good_payload("m-2")))
        assert len(target.ledger.effects()) == 2


async def test_a_server_that_refuses_the_new_session_sent_nothing(tmp_path: Path) -> None:
    async with adapter_for("mail-http", tmp_path) as (target, adapter):
        sim = target.http
        assert sim is not None
        await adapter.execute(new_call(adapter, target.good_payload("n-0")))
        sim.forget_sessions()
        sim.refuse_sessions = True
        call = new_call(adapter, target.good_payload("n-1"))
        with pytest.raises(AdapterError) as caught:
            await adapter.execute(call)
        # The 404 proved no tool ran; the new session was refused: nothing was sent.
        assert isinstance(caught.value, NoEffectError), caught.value
        assert len(target.ledger.effects()) == 1
        unread = await adapter.verify(call)
        assert unread.outcome is Outcome.UNKNOWN, unread.detail  # no session, no proof
        sim.refuse_sessions = False
        await adapter.execute(call)
        assert len(target.ledger.effects()) == 2


async def test_a_session_forgotten_before_the_sdks_tools_list_leaves_the_call_ambiguous(tmp_path: Path) -> None:
    # `call_tool` lists the tools after a session's first answer, to validate it: a server that
    # forgot the session in between answers that tools/list 404. The tool ran: the call is
    # ambiguous, never sent again (the simulator found a re-send there: tests/sim/test_sim_mcp.py).
    async with adapter_for("mail-http", tmp_path, "no-key", timeout=60.0) as (target, adapter):
        sim = target.http
        assert sim is not None
        call = new_call(adapter, target.good_payload("f-1"))
        target.inject("slow")  # applied at once, answered a few seconds later
        sending = asyncio.create_task(adapter.execute(call))
        while not target.ledger.effects():  # noqa: ASYNC110 - the ledger tells no one
            await asyncio.sleep(0.01)
        assert sim.forget_sessions() >= 1
        with pytest.raises(AdapterError) as caught:
            await sending
        assert isinstance(caught.value, AmbiguousError), caught.value
        assert len(target.ledger.effects()) == 1
        assert (await adapter.verify(call)).outcome is Outcome.CONFIRMED
        assert len(target.ledger.effects()) == 1
