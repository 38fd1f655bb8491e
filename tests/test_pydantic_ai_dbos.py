"""Pydantic AI under DBOS (`DBOSDurability`, SQLite system database) against a real gateway: the
agent process dies inside the tool's DBOS step after the charge, before DBOS records the step;
started again, DBOS recovers the workflow and re-executes the step with the same derived run id,
and the gateway answers with the same action: one charge at the Stripe simulator."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.agent_gateway import RunningGateway, running_gateway

ROOT = Path(__file__).resolve().parents[1]
# tests/dbos_agent.py's exit status under --crash (not imported from it: it loads DBOS and Pydantic
# AI, which every pytest worker's collection would then pay for).
CRASHED = 3


@pytest.fixture
async def gw(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[RunningGateway]:
    async with running_gateway(tmp_path, sim, dev_mode=True) as running:
        yield running


async def agent_process(gw: RunningGateway, system_db: Path, *flags: str) -> tuple[int, str]:
    """tests/dbos_agent.py in a process of its own: (exit code, stdout)."""
    command = [sys.executable, "-m", "tests.dbos_agent", "--system-db", str(system_db), "--target", gw.target]
    proc = await asyncio.create_subprocess_exec(
        *command,
        *("--workflow-id", "checkout-1093", "--order", "1093", *flags),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    if proc.returncode not in (0, CRASHED):
        raise AssertionError(f"dbos_agent exited {proc.returncode}:\n{err.decode()[-4000:]}")
    return proc.returncode, out.decode()


def run_ids(output: str) -> list[str]:
    return re.findall(r"^tool run_id=(\S+)$", output, re.MULTILINE)


async def test_a_step_re_executed_by_dbos_recovery_is_one_effect(gw: RunningGateway, tmp_path: Path) -> None:
    system_db = tmp_path / "dbos.sqlite"
    code, first = await agent_process(gw, system_db, "--crash")
    assert code == CRASHED and "result" not in first
    assert len(gw.effects()) == 1  # the charge happened; its step was never recorded

    code, second = await agent_process(gw, system_db, "--recover")
    assert code == 0 and "result charged" in second
    # DBOS re-executed the tool's step, with the run id it derives from the workflow.
    assert run_ids(first) == run_ids(second) == ["checkout-1093:1"]

    assert len(gw.effects()) == 1
    (action,) = await gw.actions()
    assert (action.context.run_id, action.context.step_id) == ("checkout-1093:1", "charge_deposit")
    assert action.state == pb.EFFECT_STATE_CONFIRMED and action.attempts == 1
