"""The Agents SDK's own MCP clients (stdio and streamable HTTP) in front of `effectgate mcp`, with
`mcp_meta_resolver()` as their `tool_meta_resolver`: a scripted re-plan is one charge."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ToolCallOutputItem
from agents.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp
from agents.testing import ScriptedModel, assistant_message, function_call

from effectgate.client.openai_agents import META_KEY, AgentRun, mcp_meta_resolver
from effectgate.mcp.contract import META_KEY as SERVER_META_KEY
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.agent_gateway import ACME_TOKEN, RunningGateway, running_gateway
from tests.mcp_transports import CLI, http_front_door

set_tracing_disabled(True)
CHARGE: dict[str, Any] = {"customer": "cus_42", "amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"}


@pytest.fixture
async def gw(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[RunningGateway]:
    async with running_gateway(tmp_path, sim) as running:
        yield running


@asynccontextmanager
async def agents_mcp(kind: str, gw: RunningGateway) -> AsyncIterator[MCPServer]:
    server: MCPServer
    if kind == "stdio":
        server = MCPServerStdio(
            {
                "command": CLI[0],
                "args": [*CLI[1:], "--config", str(gw.config), "--target", gw.target],
                "env": {**os.environ, "EFFECTGATE_TOKEN": ACME_TOKEN},
            },
            tool_meta_resolver=mcp_meta_resolver(),
            use_structured_content=True,
            client_session_timeout_seconds=60,
        )
        async with server:
            yield server
    else:
        async with http_front_door(gw) as url:
            server = MCPServerStreamableHttp(
                {"url": url, "headers": {"Authorization": f"Bearer {ACME_TOKEN}"}},
                tool_meta_resolver=mcp_meta_resolver(),
                use_structured_content=True,
                client_session_timeout_seconds=60,
            )
            async with server:
                yield server


def test_the_client_and_the_server_agree_on_the_meta_key() -> None:
    assert META_KEY == SERVER_META_KEY


@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_a_replan_through_mcp_is_one_charge(gw: RunningGateway, kind: str) -> None:
    model = ScriptedModel(
        [
            [function_call("charge_card", CHARGE, call_id="call_1")],
            [function_call("charge_card", {**CHARGE, "currency": "USD"}, call_id="call_2")],
            [assistant_message("done")],
        ]
    )
    async with agents_mcp(kind, gw) as server:
        agent = Agent(name="billing", model=model, mcp_servers=[server])
        run = AgentRun(run_id=f"run-oa-mcp-{kind}", scope="order:7", step="charge-deposit")
        result = await Runner.run(agent, "charge", context=run)
    answers = [json.loads(str(i.output)) for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    assert [a["replayed"] for a in answers] == [False, True]
    assert answers[0]["action_id"] == answers[1]["action_id"] and answers[0]["state"] == "CONFIRMED"
    assert len(gw.effects()) == 1
    actions = await gw.actions()
    assert len(actions) == 1 and actions[0].context.step_id == "charge-deposit" and actions[0].scope == "order:7"
