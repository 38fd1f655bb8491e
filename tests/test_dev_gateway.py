"""`make run` (`python -m effectgate_lab.dev`) leaves a gateway that the README's client example
works against, and stops everything on SIGTERM. A real child process on a free port, the README's
Python example pasted verbatim into a file and run as a newcomer would run it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

from effectgate_lab.labkit.children import free_port
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


async def run_example(program: Path, target: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_")} | {"EFFECTGATE_TARGET": target}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(program), env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()
    return out.decode()


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def test_the_readme_client_example_runs_against_make_run(tmp_path: Path) -> None:
    port = free_port()
    dev = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate_lab.dev", "--dir", str(tmp_path / "dev"),
        env={**os.environ, "EFFECTGATE_DEV_PORT": str(port), "PYTHONUNBUFFERED": "1"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert dev.stdout is not None
    try:
        banner: list[str] = []
        while not any(line.startswith("Ctrl-C") for line in banner):
            line = (await asyncio.wait_for(dev.stdout.readline(), 60)).decode()
            assert line, "dev exited before it was ready:\n" + "".join(banner)
            banner.append(line)
        text = "".join(banner)
        target = f"127.0.0.1:{port}"
        assert f"effectgate dev gateway on {target}" in text
        for tool in ("charge_card", "send_email", "activate_customer", "record_invoice"):
            assert tool in text
        program = tmp_path / "agent.py"
        program.write_text(readme_client_example())
        first = await run_example(program, target)
        assert "charged: pi_" in first and "(replayed)" not in first, first
        again = await run_example(program, target)  # the same run and step: the same action
        assert again.split()[:2] == first.split()[:2] and "(replayed)" in again, again
    finally:
        if dev.returncode is None:
            dev.send_signal(signal.SIGTERM)
        rest, _ = await asyncio.wait_for(dev.communicate(), 60)
    assert dev.returncode == 0, rest.decode()
    assert "stopped" in rest.decode()
    assert port_is_free(port), "the gateway still holds its port after SIGTERM"
