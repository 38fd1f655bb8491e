"""CrewAI with a scripted model (a `BaseLLM` subclass, no network) against a real gateway process:
a tool that failed and was retried, a task re-executed by the agent's `max_retry_limit` after the
model failed, a re-planned call with reworded arguments and a re-kickoff are one charge at the
Stripe simulator. The crew runs in `.venv-crewai` (CrewAI pins pydantic and mcp below the gateway's;
`make test` builds it), as tests/crewai_agent.py in a process of its own."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.agent_gateway import RunningGateway, running_gateway
from tests.harness import API_KEY

ROOT = Path(__file__).resolve().parents[1]
CREWAI_PYTHON = ROOT / ".venv-crewai" / "bin" / "python"
AGENT = ("-m", "tests.crewai_agent", "--target")
DOCS_PROGRAM = re.compile(r"<!-- agents-example: crewai -->\s*```python\n(.*?)```", re.S)


def crewai_python() -> Path:
    if CREWAI_PYTHON.exists():
        return CREWAI_PYTHON
    missing = f"{CREWAI_PYTHON} is missing: run `make venv-crewai` (make test builds it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(missing)
    pytest.skip(missing)


async def crew_process(gw: RunningGateway, *args: str) -> str:
    """`python ARGS` under the CrewAI environment (tests.crewai_agent, a docs program): its stdout."""
    proc = await asyncio.create_subprocess_exec(
        str(crewai_python()),
        *args,
        cwd=ROOT,
        env={
            **os.environ,
            "EFFECTGATE_TARGET": gw.target,
            "CREWAI_TRACING_ENABLED": "false",
            "CREWAI_DISABLE_TELEMETRY": "true",
            "OTEL_SDK_DISABLED": "true",
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=100)
    if proc.returncode != 0:
        raise AssertionError(f"crewai_agent exited {proc.returncode}:\n{out.decode()[-3000:]}\n{err.decode()[-4000:]}")
    return out.decode()


def builder_calls(output: str) -> list[str]:
    return re.findall(r"^builder (.+)$", output, re.MULTILINE)


async def test_a_task_re_executed_after_the_model_failed_and_a_re_plan_are_one_effect(
    tmp_path: Path, sim: StripeSimulator
) -> None:
    async with running_gateway(tmp_path, sim, dev_mode=True) as gw:
        output = await crew_process(gw, *AGENT, gw.target, "--scenario", "model-fails")
        # Kickoff 1: charge; the model fails; max_retry_limit re-executes the task and the model
        # re-plans with reworded arguments. Kickoff 2: a fresh crew, same run id.
        assert builder_calls(output) == ["cus_42 usd", "cus_42 USD", "cus_42 usd"], output
        answers = re.findall(r"^answer \d (.+)$", output, re.MULTILINE)
        assert len(answers) == 2 and all("CONFIRMED" in a for a in answers), output
        assert '"replayed": true' in answers[0] and '"replayed": true' in answers[1], output
        assert len(gw.effects()) == 1
        (action,) = await gw.actions("")
        assert (action.context.run_id, action.context.step_id) == ("crew-model-fails", "charge-deposit")
        assert action.state == pb.EFFECT_STATE_CONFIRMED and action.attempts == 1


async def test_a_tool_retried_after_a_timeout_lands_on_the_same_action(tmp_path: Path) -> None:
    # The provider takes 2 s, the client waits 0.5 s: the tool raises EffectNotSettled, CrewAI
    # invokes it again, then the model calls again with reworded arguments until the stored
    # outcome comes back.
    sim = StripeSimulator(api_key=API_KEY, search_lag=0.3, latency=2.0)
    await sim.start()
    try:
        slow: dict[str, object] = {"attempt_timeout": "5s", "gateway": {"lease_ttl": "8s"}}
        async with running_gateway(tmp_path, sim, dev_mode=True, **slow) as gw:  # type: ignore[arg-type]
            output = await crew_process(gw, *AGENT, gw.target, "--scenario", "timeout", "--timeout", "0.5")
            calls = builder_calls(output)
            # CrewAI re-invoked the failed tool with the same arguments; then it refuses a repeat
            # ("I tried reusing the same input") and the model rewords: all one action.
            assert calls[:2] == ["cus_42 usd", "cus_42 usd"], output
            assert re.search(r"^answer 1 Done\.", output, re.MULTILINE), output
            assert len(gw.effects()) == 1
            (action,) = await gw.actions("")
            assert action.context.step_id == "charge-deposit" and action.state == pb.EFFECT_STATE_CONFIRMED
    finally:
        await sim.stop()


async def test_the_docs_program_runs_and_charges_once(tmp_path: Path, sim: StripeSimulator) -> None:
    (code,) = DOCS_PROGRAM.findall((ROOT / "docs" / "agents.md").read_text())
    program = tmp_path / "example_crewai.py"
    program.write_text(code)
    async with running_gateway(tmp_path, sim, dev_mode=True) as gw:
        output = await crew_process(gw, str(program))
        assert re.search(r"^attempt 1 Done\.", output, re.MULTILINE), output
        assert re.search(r'^attempt 2 Done\. .*"replayed": true', output, re.MULTILINE), output
        assert len(gw.effects()) == 1
