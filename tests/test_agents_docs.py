"""The README's "Agent frameworks" snippets, run against a real gateway process (development
mode), and docs/agents.md's complete programs, run as a newcomer runs them: against `make run`
as it is (its config, its simulators, its MCP schemas), charges counted at the Stripe simulator.
The programs run one after another against one `make run`, as a newcomer trying them all would;
each must add exactly one charge (so no two programs share a run context with other payloads:
the gateway would refuse the second, as it should)."""

from __future__ import annotations

import ast
import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from agents import Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.agent_gateway import RunningGateway, running_gateway
from tests.dev_run import DevRun, dev_gateway

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"<!-- agents-(snippet|example): ([\w-]+) -->\s*```python\n(.*?)```", re.S)
set_tracing_disabled(True)


def blocks(path: Path, kind: str) -> dict[str, str]:
    return {name: code for k, name, code in BLOCK.findall(path.read_text()) if k == kind}


README = blocks(ROOT / "README.md", "snippet")
DOCS = blocks(ROOT / "docs" / "agents.md", "example")
ENV_PATH = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture
async def gw(tmp_path: Path, sim: StripeSimulator, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[RunningGateway]:
    monkeypatch.setenv("PATH", ENV_PATH)  # `effectgate` as a newcomer's shell finds it
    async with running_gateway(tmp_path, sim, dev_mode=True) as running:
        yield running


async def run_fragment(code: str, namespace: dict[str, Any]) -> None:
    """A README fragment as written (top-level await: it lives inside the reader's async code)."""
    compiled = compile(code, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    pending = eval(compiled, namespace)
    if pending is not None:
        await pending


def test_every_framework_has_a_readme_snippet_and_a_docs_program() -> None:
    assert set(DOCS) == {"mcp", "langgraph", "openai-agents", "pydantic-ai", "crewai"}
    # CrewAI's program runs in its own environment (tests/test_crewai.py); the README only names it.
    assert set(README) == set(DOCS) - {"crewai"}


async def test_readme_mcp_snippet(gw: RunningGateway) -> None:
    code = README["mcp"].replace("effectgate.toml", str(gw.config)).replace("127.0.0.1:50051", gw.target)
    namespace: dict[str, Any] = {}
    await run_fragment(code, namespace)
    assert namespace["result"].structured_content["state"] == "CONFIRMED"
    assert len(gw.effects()) == 1


async def test_readme_langgraph_snippet(gw: RunningGateway) -> None:
    gate = gw.client("")
    try:
        namespace: dict[str, Any] = {"gate": gate}
        await run_fragment(README["langgraph"], namespace)
    finally:
        await gate.close()
    assert len(gw.effects()) == 1
    (action,) = await gw.actions("")
    assert action.context.run_id == "lg:order-1093" and action.context.step_id.startswith("charge:")


async def test_readme_pydantic_ai_snippet(gw: RunningGateway) -> None:
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            args = {"customer": "cus_42", "amount_cents": 500}
            return ModelResponse(parts=[ToolCallPart("charge_deposit", args, tool_call_id="call_1")])
        return ModelResponse(parts=[TextPart("charged")])

    gate = gw.client("")
    try:
        namespace: dict[str, Any] = {"gate": gate}
        await run_fragment(README["pydantic-ai"], namespace)
        for _ in range(2):  # the run re-run with its run id: one charge
            with namespace["agent"].override(model=FunctionModel(llm)):
                assert (await namespace["run"]()).output == "charged"
    finally:
        await gate.close()
    assert len(gw.effects()) == 1


async def test_readme_openai_agents_snippet(gw: RunningGateway) -> None:
    gate = gw.client("")
    try:
        namespace: dict[str, Any] = {"gate": gate}
        await run_fragment(README["openai-agents"], namespace)
        call = function_call("charge_deposit", {"customer": "cus_42", "amount_cents": 500}, call_id="call_1")
        agent = namespace["agent"].clone(model=ScriptedModel([[call], [assistant_message("charged")]]))
        paused = await Runner.run(agent, "charge the deposit", context=namespace["context"])
        state = paused.to_state()
        state.approve(paused.interruptions[0])
        assert (await Runner.run(agent, state)).final_output == "charged"
    finally:
        await gate.close()
    assert len(gw.effects()) == 1


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def make_run(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DevRun]:
    async with dev_gateway(tmp_path_factory.mktemp("dev")) as run:
        yield run


def charges(make_run: DevRun) -> list[dict[str, Any]]:
    return [e for e in make_run.effects() if e["kind"] == "payment_intent"]


async def run_program(make_run: DevRun, program: Path, cwd: Path) -> tuple[str, int]:
    """The program's output and how many charges it added at the Stripe simulator."""
    before = charges(make_run)
    # The shell after the banner's `export` lines: EFFECTGATE_TARGET and EFFECTGATE_CONFIG.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(program), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env=make_run.env(), cwd=cwd,
    )  # fmt: skip
    output = (await asyncio.wait_for(proc.communicate(), 180))[0].decode()
    assert proc.returncode == 0, output
    after = charges(make_run)
    assert after[: len(before)] == before, output
    return output, len(after) - len(before)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", ["mcp", "langgraph", "openai-agents", "pydantic-ai"])
async def test_docs_program_runs_against_make_run_and_charges_once(tmp_path: Path, name: str, make_run: DevRun) -> None:
    program = tmp_path / f"example_{name.replace('-', '_')}.py"  # never shadow a package
    program.write_text(DOCS[name])
    output, charged = await run_program(make_run, program, tmp_path)
    assert charged == 1, output
    expected = {
        "mcp": ["first: CONFIRMED", "re-plan replayed: True", "refused:"],
        "langgraph": ["sent", "replayed", "done act_"],
        "openai-agents": ["attempt 1 Deposit charged.", "attempt 2 Deposit charged."],
        "pydantic-ai": ["call_0 Done. False", "call_1 Done. True", "attempt 1 Deposit charged.", "attempt 2"],
    }[name]
    for line in expected:
        assert line in output, output
