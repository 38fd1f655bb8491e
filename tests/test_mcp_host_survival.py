"""`effectgate mcp` outlives its host: a call the host cancels or abandons still completes (the
action is stored, the host's next call replays it), and the front door keeps answering. The
provider takes 3 s, the host waits 1 s; effects counted at the Stripe simulator."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from effectgate.mcp import run_meta
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.agent_gateway import ACME_TOKEN, RunningGateway, running_gateway
from tests.harness import API_KEY
from tests.mcp_transports import CLI, http_front_door, mcp_client

CHARGE: dict[str, Any] = {"customer": "cus_42", "amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"}
PROVIDER_DELAY = 3.0


@pytest.fixture
async def slow_gw(tmp_path: Path) -> AsyncIterator[RunningGateway]:
    sim = StripeSimulator(api_key=API_KEY, search_lag=0.3, latency=PROVIDER_DELAY)
    await sim.start()
    try:
        async with running_gateway(tmp_path, sim, attempt_timeout="6s", gateway={"lease_ttl": "10s"}) as running:
            yield running
    finally:
        await sim.stop()


async def until(check: Callable[[], Awaitable[bool]], *, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def confirmed_once(gw: RunningGateway) -> bool:
    actions = await gw.actions()
    return len(actions) == 1 and actions[0].state == pb.EFFECT_STATE_CONFIRMED and len(gw.effects()) == 1


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_cancelled_call_completes_and_the_next_call_replays_it(slow_gw: RunningGateway, transport: str) -> None:
    meta = run_meta("run-cancel", "charge-deposit", scope="order:1093")
    async with mcp_client(transport, slow_gw, ACME_TOKEN) as client:
        # The host gives up after 1 s and sends notifications/cancelled; the provider is still working.
        with pytest.raises(MCPError, match="timed out"):
            await client.call_tool("charge_card", CHARGE, read_timeout_seconds=1.0, meta=meta)
        # The same connection still answers, and the same call again is the same action.
        assert "charge_card" in {tool.name for tool in (await client.list_tools()).tools}
        again = await client.call_tool("charge_card", CHARGE, meta=meta)
        assert again.structured_content is not None, again
        assert again.structured_content["state"] == "CONFIRMED"
        assert again.structured_content["receipt"]["result"]["amount"] == 1000  # an integer, not 1000.0
        assert json.dumps(again.structured_content["receipt"]["result"]["amount"]) == "1000"
        # And a third call, on the same connection, later: still one action.
        third = await client.call_tool("charge_card", CHARGE, meta=meta)
        assert third.structured_content is not None and third.structured_content["replayed"] is True
    await until(lambda: confirmed_once(slow_gw))


async def read_message(stdout: asyncio.StreamReader, wanted: int) -> dict[str, Any]:
    while True:
        line = await asyncio.wait_for(stdout.readline(), 60)
        assert line, "effectgate mcp closed stdout"
        message: dict[str, Any] = json.loads(line)
        if message.get("id") == wanted:
            return message


async def test_a_stdio_host_that_vanishes_mid_call_leaves_the_action_completed(slow_gw: RunningGateway) -> None:
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        *("--config", str(slow_gw.config), "--target", slow_gw.target),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "EFFECTGATE_TOKEN": ACME_TOKEN, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())

    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "vanishing", "version": "0"}}
    send({"id": 1, "method": "initialize", "params": init})
    assert "result" in await read_message(proc.stdout, 1)
    send({"method": "notifications/initialized"})
    meta = dict(run_meta("run-vanish", "charge-deposit", scope="order:1094"))
    send({"id": 2, "method": "tools/call", "params": {"name": "charge_card", "arguments": CHARGE, "_meta": meta}})
    await proc.stdin.drain()
    # The provider has the request in hand: the host vanishes (its end of both pipes closes).
    await until(lambda: _dispatched(slow_gw))
    proc.stdin.close()
    proc._transport.get_pipe_transport(1).close()  # type: ignore[attr-defined]  # and our read end of stdout
    assert await asyncio.wait_for(proc.wait(), 60) == 0
    await until(lambda: confirmed_once(slow_gw))


async def _dispatched(gw: RunningGateway) -> bool:
    return len(await gw.actions()) == 1


async def test_an_http_host_that_disconnects_mid_call_leaves_the_action_completed(slow_gw: RunningGateway) -> None:
    meta = dict(run_meta("run-disconnect", "charge-deposit", scope="order:1095"))
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "charge_card", "arguments": CHARGE, "_meta": meta},
    }
    headers = {
        "Authorization": f"Bearer {ACME_TOKEN}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    async with http_front_door(slow_gw) as url:
        async with httpx.AsyncClient(headers=headers, timeout=1.0) as http:
            with pytest.raises(httpx.ReadTimeout):  # the host hangs up after 1 s
                await http.post(url, json=call)
        await until(lambda: confirmed_once(slow_gw))
        # The front door lives on: the same call now is the stored action.
        async with httpx.AsyncClient(headers=headers, timeout=30.0) as http:
            answer = (await http.post(url, json=call)).json()
        assert answer["result"]["structuredContent"]["replayed"] is True, answer
    assert len(slow_gw.effects()) == 1
