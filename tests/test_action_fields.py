"""Operators see what they decided: every answer that shows an action to a person (Approve,
Deny, ListActions, WatchActions, GetAction) carries `approvals_required`, `approved_by` and
`policy_version` the same way (rpc/wire.person_action_pb), and the CLI's `actions -o json` and
`show -o json` agree field by field. A real gateway (port 0, SQLite file), the Stripe
simulator on loopback, the CLI as a child process."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, LiveGateway, config_doc, start_gateway, stripe_tools
from tests.test_decisions import PRINCIPALS, TOKENS, auth
from tests.test_execute import request

FIELDS = ("approvals_required", "approved_by", "policy_version")


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[LiveGateway]:
    sim = StripeSimulator(api_key=API_KEY)
    await sim.start()
    doc = config_doc(
        f"sqlite:///{tmp_path}/eg.db",
        principals=PRINCIPALS,
        **stripe_tools(sim.base_url, approval="required", approvals=2),
    )
    gateway = await start_gateway(doc)
    yield gateway
    await gateway.close()
    await sim.stop()


def shown(action: pb.Action) -> tuple[int, list[str], str]:
    return action.approvals_required, list(action.approved_by), action.policy_version


async def cli_json(target: str, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_")}
    env |= {"EFFECTGATE_TOKEN": TOKENS["alice"], "EFFECTGATE_TARGET": target}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", *args, "-o", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


async def test_every_answer_to_a_person_shows_the_approvals_the_same_way(live: LiveGateway) -> None:
    watch = live.stub.WatchActions(pb.WatchActionsRequest(), metadata=auth("watcher"), timeout=30)
    start = await anext(aiter(watch))
    assert start.cursor
    waiting = (await live.stub.Execute(request(run="run-1"), metadata=auth("bot"), timeout=10)).action
    act = waiting.action_id
    approved = await live.operator.Approve(pb.ApproveRequest(action_id=act, note="1 of 2"), metadata=auth("alice"))
    version = approved.policy_version
    assert version.startswith("pv_")
    assert shown(approved) == (2, ["alice"], version)  # "1 of 2", in the answer itself
    got = await live.stub.GetAction(pb.GetActionRequest(action_id=act), metadata=auth("watcher"))
    listed = (await live.stub.ListActions(pb.ListActionsRequest(), metadata=auth("watcher"))).actions
    assert shown(got) == shown(listed[0]) == (2, ["alice"], version)
    seen: list[pb.Action] = []
    async for change in watch:
        seen.append(change.action)
        if list(change.action.approved_by) == ["alice"]:
            break
    assert shown(seen[-1]) == (2, ["alice"], version)
    watch.cancel()
    # Agents keep the record only: no names of the people who approved.
    agent_view = (await live.stub.ListActions(pb.ListActionsRequest(), metadata=auth("bot"))).actions[0]
    assert shown(agent_view) == (0, [], "")

    other = (await live.stub.Execute(request(run="run-2"), metadata=auth("bot"), timeout=10)).action
    denied = await live.operator.Deny(pb.DenyRequest(action_id=other.action_id, note="no"), metadata=auth("bob"))
    assert denied.approvals_required == 2 and denied.policy_version == version

    # The CLI's list and show agree on every field the list shows.
    rows, one = await asyncio.gather(cli_json(live.target, "actions"), cli_json(live.target, "show", act))
    row = next(r for r in rows if r["action_id"] == act)
    assert {k: one[k] for k in row} == row
    assert row["approvals_required"] == 2 and row["approved_by"] == ["alice"] and row["policy_version"] == version
    assert set(one) - set(row) <= {"payload", "settled_at"}  # what only one action's page shows
