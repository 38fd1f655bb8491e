"""Every built-in adapter through a real gateway, with the study's "high" fault mix on.

An agent runs several logical actions side by side and, like a re-planning model, calls each one
three times with fresh tool-call ids. Then, once the reconciler has settled what it can, every
action must be CONFIRMED, REJECTED or UNKNOWN with a reason, and the provider's own ledger must
hold no duplicate effect for any action.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from effectgate.client.context import RunContext
from effectgate.v1 import gateway_pb2, gateway_pb2_grpc
from effectgate_lab.simulators.faults import FaultPlan
from tests import dovecot
from tests.adapter_targets import CANARY, LAG, TARGET_NAMES, start_target
from tests.harness import config_doc, start_gateway

ACTIONS = 12
SCRIPT = [
    "drop_after_commit",
    "conflict",
    "delayed_visibility",
    "partial",
    "error_after_commit",
    "slow",
    None,
]
CALLS_PER_ACTION = 3
SETTLED = {
    gateway_pb2.EFFECT_STATE_CONFIRMED,
    gateway_pb2.EFFECT_STATE_REJECTED,
    gateway_pb2.EFFECT_STATE_UNKNOWN,
}


@pytest.fixture(scope="module")
def imap_server() -> Iterator[dovecot.DovecotServer]:
    binary = dovecot.find_dovecot()
    if binary is None:
        reason = "dovecot not found (scripts/install_test_services.sh installs dovecot-imapd)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: not skipping)")
        pytest.skip(reason)
    assert binary is not None
    server = dovecot.start_server(binary, password=CANARY)
    try:
        yield server
    finally:
        server.destroy()


async def _settle(
    stub: gateway_pb2_grpc.EffectGatewayAsyncStub, run_id: str, within: float = 20.0
) -> gateway_pb2.Action:
    """The run's one action once it is CONFIRMED, REJECTED or UNKNOWN (the reconciler drives
    DISPATCHED and NOT_FOUND actions on; UNKNOWN is where it honestly stops)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while True:
        page = await stub.ListActions(gateway_pb2.ListActionsRequest(run_id=run_id))
        assert len(page.actions) == 1, f"{run_id}: one logical action, found {len(page.actions)}"
        action: gateway_pb2.Action = page.actions[0]
        if action.state in SETTLED or loop.time() > end:
            return action
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("name", TARGET_NAMES)
async def test_faults_through_gateway(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    imap = request.getfixturevalue("imap_server") if name == "smtp+imap" else None
    target = await start_target(name, imap)
    assert target.sim is not None
    # Every fault kind once, in a fixed order, then the study's "high" mix at random. A `slow`
    # answer outlasts the attempt timeout: a lost response from the gateway's side.
    target.sim.injector.configure(FaultPlan.study_level("high", seed=3, visibility_lag=LAG, slow_seconds=2.5))
    target.sim.injector.script(SCRIPT)
    tool = "act"
    doc = config_doc(
        f"sqlite:///{tmp_path / 'effects.db'}",
        adapters={target.adapter_name: target.settings()},
        tools={
            tool: {
                "adapter": target.adapter_name,
                "consistency_window": "1s",  # covers the simulators' visibility lag
                "attempt_timeout": "2s",
                "deadline": "6s",
                "max_attempts": 6,
            }
        },
    )
    live = await start_gateway(doc)
    try:
        payloads = [target.good_payload(f"g{i}") for i in range(ACTIONS)]
        payloads.append(target.refused_payload("refused"))

        async def agent(i: int) -> None:
            ctx = RunContext(run_id=f"run-{name}-{i}", step_id="step-1", agent="planner")
            for _ in range(CALLS_PER_ACTION):
                try:
                    await live.client.execute(tool, payloads[i], scope=f"order:{i}", context=ctx, timeout=8)
                except grpc.aio.AioRpcError as err:
                    # In flight / deadline: the agent just calls again with the same context.
                    assert err.code() in (grpc.StatusCode.ABORTED, grpc.StatusCode.DEADLINE_EXCEEDED), err

        # The logical actions side by side (each one's three calls in turn): an action whose
        # fault holds it to the deadline no longer holds up the others. The refused one comes
        # last, alone (the simulators refuse it before any fault is drawn).
        await asyncio.gather(*(agent(i) for i in range(ACTIONS)))
        await agent(ACTIONS)
        actions = [await _settle(live.stub, f"run-{name}-{i}") for i in range(len(payloads))]
    finally:
        await live.close()
        await target.stop()

    for action in actions:
        assert action.state in SETTLED, f"{action.action_id} ended {action.state}: {action.reason}"
        if action.state == gateway_pb2.EFFECT_STATE_UNKNOWN:
            assert action.reason, f"{action.action_id}: UNKNOWN without a reason"
    assert actions[-1].state == gateway_pb2.EFFECT_STATE_REJECTED, actions[-1]
    duplicates = {k: n for k, n in Counter(target.effect_identities()).items() if n > 1}
    assert not duplicates, f"duplicate effects at the provider: {duplicates}"
    assert {str(f) for f in target.sim.injector.decisions} >= {str(f) for f in SCRIPT}
    states = Counter(gateway_pb2.EffectState.Name(a.state) for a in actions)
    assert states["EFFECT_STATE_CONFIRMED"] > 0, states
    if name == "smtp":
        # No read API: a lost reply can only end UNKNOWN, and says why.
        unknown = [a for a in actions if a.state == gateway_pb2.EFFECT_STATE_UNKNOWN]
        assert unknown and all("no read API" in a.reason for a in unknown)
