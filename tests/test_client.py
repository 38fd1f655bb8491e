"""The client package: installs alone (grpcio + protobuf), and its run context behaves as agent
runtimes need (stable steps, subagents inherit the run, asyncio tasks carry the context)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from effectgate.client import RunContext, current, run, stable_step_id, step, subagent

ROOT = Path(__file__).resolve().parent.parent


def test_run_step_and_subagents() -> None:
    with pytest.raises(LookupError):
        current()
    with run("run-9", agent="planner"):
        with step("charge-deposit"):
            assert current() == RunContext("run-9", "charge-deposit", agent="planner")
            with subagent("billing"):
                assert current().run_id == "run-9" and current().step_id == "charge-deposit"
                assert current().agent == "billing"
        assert current().step_id == ""
    with pytest.raises(LookupError):
        current()


async def test_context_follows_asyncio_tasks() -> None:
    async def worker(name: str) -> RunContext:
        with subagent(name):
            await asyncio.sleep(0)
            return current()

    with run("run-1"), step("s"):
        seen = await asyncio.gather(worker("a"), worker("b"))
    assert {c.agent for c in seen} == {"a", "b"}
    assert {(c.run_id, c.step_id) for c in seen} == {("run-1", "s")}


def test_stable_step_ids() -> None:
    assert stable_step_id("node", 3, "order:7") == stable_step_id("node", 3, "order:7")
    assert stable_step_id("node", 3) != stable_step_id("node", 4)
    assert stable_step_id("a|b", "c") != stable_step_id("a", "b|c")


def test_client_installs_alone(tmp_path: Path) -> None:
    """A fresh virtualenv gets the client with grpcio and protobuf and nothing of the gateway."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(ROOT / "clients" / "python")]
    subprocess.run(pip, check=True, timeout=300, capture_output=True)
    probe = (
        "import importlib.metadata as m, importlib.util as u\n"
        "import effectgate.client, effectgate.v1.gateway_pb2_grpc, effectgate.tools.v1.tools_pb2\n"
        "assert u.find_spec('effectgate.gateway') is None\n"
        "reqs = [r for r in m.requires('effectgate-client') if 'extra ==' not in r]  # framework extras\n"
        "print(sorted(r.split()[0].split('>')[0] for r in reqs))\n"
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "['grpcio', 'protobuf']"
