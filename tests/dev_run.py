"""`make run` as a child process for tests: started on a free port in a folder of the test's, its
banner read, stopped with SIGTERM. The docs' programs and the dev gateway's own tests run
against it exactly as a newcomer would, after `make run`."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from effectgate_lab.devrun.layout import Ports

ENV_PATH = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
# `make run`'s simulators take fixed ports above the gateway's (+1000 ... +4000). A port from
# port 0 would put them in the kernel's ephemeral range (32768-60999 here), where any other
# test's listener or outgoing connection can take one between our check and the run's bind
# (it happened: "cannot start: port(s) in use: crm ..."). Below that range only a fixed port
# can collide, and every port of the five is checked free first.
DEV_GATEWAY_PORTS = range(20000, 28000)
# A run that still lost its ports to another test's `make run` is started again on others.
PORT_ATTEMPTS = 3


@dataclass
class DevRun:
    proc: asyncio.subprocess.Process
    port: int
    root: Path
    banner: str = ""
    rest: list[str] = field(default_factory=list)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def folder(self) -> Path:
        return self.root / str(self.port)

    @property
    def config(self) -> Path:
        return self.folder / "effectgate.toml"

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.folder / "state.json").read_text())
        return data

    def effects(self, simulator: str = "stripe") -> list[dict[str, Any]]:
        """The simulator's ledger, read over its admin route as any program would."""
        url = self.state()[f"{simulator}_url"]
        ledger: list[dict[str, Any]] = httpx.get(f"{url}/_sim/ledger", timeout=10).json()["ledger"]
        return ledger

    def env(self) -> dict[str, str]:
        """A newcomer's shell after the banner's `export` line (no token: development mode)."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_")}
        return clean | {"EFFECTGATE_TARGET": self.target, "EFFECTGATE_CONFIG": str(self.config), "PATH": ENV_PATH}


def free_dev_port() -> int:
    """A gateway port for `make run` whose derived ports are all free now."""
    for _ in range(500):
        port = random.choice(DEV_GATEWAY_PORTS)
        if not Ports.around(port).taken():
            return port
    raise RuntimeError(f"no free set of make run ports in {DEV_GATEWAY_PORTS}")


async def start_dev(root: Path, port: int | None = None, cwd: Path | None = None) -> DevRun:
    """Starts `python -m effectgate_lab.dev` and waits for its banner (or its exit); on a port of
    its own choosing unless given one, again on other ports if another run took those."""
    if port is not None:
        return await _start_dev_on(root, port, cwd)
    for _ in range(PORT_ATTEMPTS - 1):
        run = await _start_dev_on(root, free_dev_port(), cwd)
        if "Ctrl-C" in run.banner or "in use" not in run.banner:
            return run
        await refused_dev(run)
    return await _start_dev_on(root, free_dev_port(), cwd)


async def _start_dev_on(root: Path, port: int, cwd: Path | None) -> DevRun:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate_lab.dev", "--dir", str(root), "--port", str(port),
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PATH": ENV_PATH}, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    run = DevRun(proc, port, root)
    assert proc.stdout is not None
    lines: list[str] = []
    while not any(line.startswith("Ctrl-C") for line in lines):
        line = (await asyncio.wait_for(proc.stdout.readline(), 90)).decode()
        if not line:
            break
        lines.append(line)
    run.banner = "".join(lines)
    return run


async def refused_dev(run: DevRun) -> str:
    """The rest of the output of a `make run` that refuses to start: it exits by itself (no
    signal is sent, which could land while it is already exiting)."""
    rest, _ = await asyncio.wait_for(run.proc.communicate(), 90)
    return rest.decode()


async def stop_dev(run: DevRun) -> str:
    if run.proc.returncode is None:
        run.proc.send_signal(signal.SIGTERM)
    rest, _ = await asyncio.wait_for(run.proc.communicate(), 90)
    return rest.decode()


@asynccontextmanager
async def dev_gateway(root: Path) -> AsyncIterator[DevRun]:
    run = await start_dev(root)
    assert "Ctrl-C stops" in run.banner, run.banner
    try:
        yield run
    finally:
        await stop_dev(run)
