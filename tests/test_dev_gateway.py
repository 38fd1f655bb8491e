"""`make run` (`python -m effectgate_lab.dev`) as a newcomer meets it: the README's client example
works against it; a second `make run` on a busy port or folder stops before it touches anything
(the first one's store stays whole); the banner's commands work as printed; a tool waits for an
approval; `effectgate dev trigger` makes the simulator lose an answer or sends a signed webhook;
SIGTERM stops everything. Real child processes on free ports."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import socket
import sys
from pathlib import Path

from effectgate.client import EffectGateClient, State, run, step
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate_lab.devrun.layout import port_is_free
from effectgate_lab.labkit.children import free_port
from tests.dev_run import DevRun, dev_gateway, free_dev_port, refused_dev, start_dev, stop_dev
from tests.test_readme_snippets import FENCE

ROOT = Path(__file__).resolve().parent.parent


def readme_client_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## How agent code calls it") :]
    section = section[: section.index("\n## ", 1)]
    examples = [m.group(2) for m in FENCE.finditer(section) if m.group(1) == "python"]
    assert len(examples) == 1, "the README's section shows one Python client example"
    assert "make run" in section, "the README says which gateway the example runs against"
    return examples[0]


async def run_example(program: Path, dev: DevRun) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(program), env=dev.env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()
    return out.decode()


async def shell(command: str, dev: DevRun) -> tuple[int, str]:
    """One banner command, typed into a shell as printed."""
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", command, env=dev.env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return int(proc.returncode or 0), out.decode()


def banner_command(dev: DevRun, starts: str) -> str:
    """The banner's command line that begins with `starts` after the `effectgate` prefix, without its comment."""
    for line in dev.banner.splitlines():
        command = line.split("#")[0].strip()
        if re.search(rf"(^|/)effectgate {re.escape(starts)}", command):
            return command
    raise AssertionError(f"no banner command {starts!r}:\n{dev.banner}")


async def test_the_readme_client_example_runs_against_make_run(tmp_path: Path) -> None:
    dev = await start_dev(tmp_path / "dev")
    try:
        assert f"effectgate dev gateway on {dev.target}" in dev.banner, dev.banner
        assert "each start is fresh" in dev.banner
        for tool in ("charge_card", "charge_with_approval", "send_email", "activate_customer", "record_invoice"):
            assert tool in dev.banner
        program = tmp_path / "agent.py"
        program.write_text(readme_client_example())
        first = await run_example(program, dev)
        assert "charged: pi_" in first and "(replayed)" not in first, first
        again = await run_example(program, dev)  # the same run and step: the same action
        assert again.split()[:2] == first.split()[:2] and "(replayed)" in again, again
    finally:
        rest = await stop_dev(dev)
    assert dev.proc.returncode == 0, rest
    assert "stopped" in rest
    assert port_is_free(dev.port), "the gateway still holds its port after SIGTERM"


def _deleted_files(pid: int) -> list[str]:
    """Files the process holds open that were removed from the file system (Linux /proc)."""
    held = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            held.append(os.readlink(fd))
        except OSError:
            continue
    return [name for name in held if name.endswith("(deleted)")]


def _gateway_pids(parent: int) -> list[int]:
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return [int(pid) for pid in children]


async def test_a_second_make_run_on_a_busy_port_leaves_the_first_ones_store_intact(tmp_path: Path) -> None:
    program = tmp_path / "agent.py"
    program.write_text(readme_client_example())
    async with dev_gateway(tmp_path / "dev") as first:
        before = await run_example(program, first)
        second = await start_dev(tmp_path / "dev", first.port)
        out = second.banner + await refused_dev(second)
        assert second.proc.returncode == 2, out
        assert "in use by a running `make run`" in out and "Traceback" not in out, out
        (gateway,) = _gateway_pids(first.proc.pid)
        assert not [name for name in _deleted_files(gateway) if "effectgate.db" in name]
        assert (first.folder / "effectgate.db").exists()
        again = await run_example(program, first)  # the first gateway's store still holds the action
        assert "(replayed)" in again and again.split()[:2] == before.split()[:2], again
        # Another port is another folder, and both run.
        async with dev_gateway(tmp_path / "dev") as other:
            assert other.folder != first.folder
            assert "charged: pi_" in await run_example(program, other)


async def test_a_port_held_by_another_program_stops_make_run_before_it_touches_the_folder(tmp_path: Path) -> None:
    with socket.socket() as holder:
        port = free_dev_port()  # the simulators' ports above it are free: only the gateway's is held
        holder.bind(("127.0.0.1", port))
        holder.listen()
        folder = tmp_path / "dev" / str(port)
        folder.mkdir(parents=True)
        (folder / "effectgate.db").write_text("the last run's store")
        dev = await start_dev(tmp_path / "dev", port)
        out = dev.banner + await refused_dev(dev)
    assert dev.proc.returncode == 2, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and f"gateway {port}" in lines[0] and "in use" in lines[0], out
    assert (folder / "effectgate.db").read_text() == "the last run's store"


async def test_the_banner_commands_work_as_printed_approval_and_triggers(tmp_path: Path) -> None:
    async with dev_gateway(tmp_path / "dev") as dev:
        code, listed = await shell(banner_command(dev, "actions"), dev)
        assert code == 0, listed
        async with EffectGateClient(dev.target) as client:
            with run(run_id="dev-test"), step("deposit"):
                held = await client.execute(
                    "charge_with_approval",
                    ChargeCard(customer="cus_wait", amount=1250, currency="eur", payment_method="pm_card_visa"),
                    scope="order:1",
                )
            assert held.action.state == State.AWAITING_APPROVAL
            code, out = await shell(banner_command(dev, "approve").replace("ACTION_ID", held.action.action_id), dev)
            assert code == 0, out
            approved = await client.get(held.action.action_id)
            for _ in range(100):
                if approved.state == State.CONFIRMED:
                    break
                await asyncio.sleep(0.2)
                approved = await client.get(held.action.action_id)
            assert approved.state == State.CONFIRMED
            code, out = await shell(banner_command(dev, "dev trigger"), dev)  # the first: lost-answer
            assert code == 0 and "answer is lost" in out, out
            effects_before = len(dev.effects())
            with run(run_id="dev-test"), step("lost"):
                lost = await client.execute(
                    "charge_card",
                    ChargeCard(customer="cus_lost", amount=500, currency="usd", payment_method="pm_card_visa"),
                    scope="order:2",
                    timeout=30,
                )
            assert lost.action.state == State.CONFIRMED, lost.action
            assert len(dev.effects()) == effects_before + 1  # the lost answer was proved, not re-sent
            webhook = [*shlex.split(banner_command(dev, "dev trigger"))[:-1], "webhook", lost.action.action_id]
            code, out = await shell(shlex.join(webhook), dev)
            # Settled already: the gateway ignored it, and the line says why.
            assert code == 0 and "the gateway answered 200: ignored (" in out, out
            assert f"{lost.action.action_id} is settled already" in out, out
    assert free_port()  # nothing left behind on loopback by the runs above
