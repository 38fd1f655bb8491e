"""An upstream MCP server that forgets the gateway's session, met through a real gateway (gRPC on
port 0, SQLite; in this process, or an `effectgate serve` child killed with SIGKILL in between).
The effects are counted in the upstream's own ledger: exactly one per action, and an action never
ends REJECTED while its effect exists."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from effectgate.client import EffectGateClient
from effectgate.client.context import RunContext
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.mcp_upstream.http import McpHttpSimulator
from effectgate_lab.mcp_upstream.ledger import JsonDict
from effectgate_lab.mcp_upstream.servers import _error
from tests.harness import GatewayProcess
from tests.test_mcp_upstream_gateway import _args, _settle, _struct, python_door, stack

Read = Callable[[JsonDict], Awaitable[Any]]


def _forget_after_first_read(sim: McpHttpSimulator, read: str) -> None:
    """The first read is answered, then the server forgets every session (an expiry sweep): the
    request after it names a session the server no longer knows."""
    upstream = sim.upstream
    original: Read = getattr(upstream, read)
    reads = 0

    async def answered_then_forgotten(args: JsonDict) -> Any:
        nonlocal reads
        answer = await original(args)
        reads += 1
        if reads == 1:
            sim.forget_sessions()
        return answer

    setattr(upstream, read, answered_then_forgotten)


async def test_a_keyed_resend_meeting_a_forgotten_session_confirms_the_effect(tmp_path: Path) -> None:
    # The first send applies, hidden from the list for a while, and its answer is lost; the read
    # finds nothing yet (inside the window) and forgets the session; the keyed re-send meets the
    # 404. Before the fix: REJECTED ("JSON-RPC error -32600: Session not found") with the message
    # sent.
    async with stack("mail-http", tmp_path) as s:
        sim = s.target.http
        assert sim is not None
        sim.upstream.visibility_lag = 1.0
        s.target.faults.script(["delayed_visibility+drop_after_commit"])
        _forget_after_first_read(sim, "_list_messages")
        state = await python_door(s)(s.tool, _args("mail", "fg-1"), "fg-1")
        action = await _settle(s, "fg-1", within=60.0, until={pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED})
        assert action.state == pb.EFFECT_STATE_CONFIRMED, (state, action.reason)
        assert len(s.target.ledger.effects()) == 1
        assert sim.forgotten >= 1


async def test_every_new_write_after_a_restart_is_sent(tmp_path: Path) -> None:
    # Before the fix: every write after the restart was REJECTED with nothing reaching the tool.
    async with stack("tracker-http", tmp_path) as s:
        sim = s.target.http
        assert sim is not None
        door = python_door(s)
        assert await door(s.tool, _args("tracker", "before"), "before") == "CONFIRMED"
        for round_ in range(3):
            await sim.restart()
            states = await asyncio.gather(
                *(door(s.tool, _args("tracker", f"r{round_}-{i}"), f"r{round_}-{i}") for i in range(4))
            )
            assert set(states) == {"CONFIRMED"}, states
        assert len(s.target.ledger.effects()) == 13


async def _action(target: str, run_id: str) -> pb.Action:
    async with grpc.aio.insecure_channel(target) as channel:
        page = await gateway_pb2_grpc.EffectGatewayStub(channel).ListActions(pb.ListActionsRequest(run_id=run_id))
    assert len(page.actions) == 1, page
    action: pb.Action = page.actions[0]
    return action


async def _until_state(target: str, run_id: str, states: set[Any], within: float = 60.0) -> pb.Action:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while True:
        action = await _action(target, run_id)
        if action.state in states or loop.time() > end:
            return action
        await asyncio.sleep(0.2)


async def test_an_action_in_doubt_is_proved_once_reads_come_back_across_a_kill_and_a_restart(tmp_path: Path) -> None:
    # A no-key tracker: the write applies and its answer is lost; the reads are down, so the action
    # parks UNKNOWN. The gateway is killed with SIGKILL; a new one starts on the same store while
    # the reads are still down, then the upstream forgets the new gateway's session and its reads
    # come back. Before the fix the reads met the 404 for ever: UNKNOWN.
    async with stack("tracker-http", tmp_path) as s:
        sim = s.target.http
        assert sim is not None
        down = True
        refused = 0  # reads answered while down
        original: Read = sim.upstream._list_issues

        async def reads(args: JsonDict) -> Any:
            nonlocal refused
            if down:
                refused += 1
                return _error("unavailable", "the index is rebuilding")
            return await original(args)

        sim.upstream._list_issues = reads  # type: ignore[method-assign]
        # The stack's own gateway idles on its own store; these children share another.
        doc = {**s.doc, "store": {"url": f"sqlite:///{tmp_path / 'killed.db'}"}}
        config = write_config(doc, tmp_path / "effectgate.toml")
        doomed = GatewayProcess(config)
        try:
            await doomed.ready()
            s.target.faults.script(["drop_after_commit"])
            client = EffectGateClient(doomed.target)
            ctx = RunContext(run_id="kill-1", step_id="step-1", agent="agent")
            with contextlib.suppress(grpc.aio.AioRpcError):
                await client.execute(
                    s.tool, _struct(_args("tracker", "kill-1")), scope="s:kill-1", context=ctx, timeout=15
                )
            await client.close()
            action = await _until_state(doomed.target, "kill-1", {pb.EFFECT_STATE_UNKNOWN})
            assert action.state == pb.EFFECT_STATE_UNKNOWN, action
        finally:
            doomed.kill()
        assert len(s.target.ledger.effects()) == 1
        sim.forget_sessions()  # the killed gateway's (it never said goodbye)
        survivor = GatewayProcess(config)
        try:
            await survivor.ready()
            # The new gateway's reconciler holds a session (its reads still fail) ...
            before = refused
            await _until(lambda: bool(sim.sessions()) and refused > before, "the survivor read on its session")
            # ... which the server forgets (an expiry sweep: the server stays up, so the next read
            # meets the 404 rather than a closed connection), as the reads come back.
            down = False
            assert sim.forget_sessions() >= 1
            action = await _until_state(survivor.target, "kill-1", {pb.EFFECT_STATE_CONFIRMED})
            assert action.state == pb.EFFECT_STATE_CONFIRMED, action.reason
            assert len(s.target.ledger.effects()) == 1
        finally:
            assert await survivor.stop() == 0


async def _until(check: Callable[[], bool], what: str, within: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not check():
        assert loop.time() < end, f"not within {within:g}s: {what}"
        await asyncio.sleep(0.05)
