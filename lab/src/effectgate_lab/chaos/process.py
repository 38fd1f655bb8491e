"""`effectgate serve` in a child process that the harness can kill -9 and restart on one address
(its config's `[server] listen`: a Unix socket when it restarts, which no other process can take)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

from effectgate_lab.labkit.children import free_port

__all__ = ["ChildGateway", "free_port"]


class ChildGateway:
    """One `effectgate serve` process at a time; `kill()` is a real SIGKILL."""

    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path
        self.log = config_path.with_suffix(".log")
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self, timeout: float = 60.0) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("EFFECTGATE_CRASH_AT", None)
        with self.log.open("ab") as errors:  # kept beside the config, shown if the start fails
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *("-m", "effectgate.gateway", "--log-level", "ERROR", "serve"),
                *("--config", str(self.config_path)),
                stdout=asyncio.subprocess.PIPE,
                stderr=errors,
                env=env,
            )
        assert self.proc.stdout is not None
        # The one line it prints to stdout says it listens (logs go to stderr, into the log file).
        try:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), timeout)).decode()
        except TimeoutError:  # a machine too loaded to start it in time: the caller may try again
            line = f"nothing in {timeout:g}s"
        if not re.search(r"serving on (port \d+|unix:\S+)", line):
            await self.kill()
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"effectgate serve did not start: {line!r}\n{tail}")

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await asyncio.wait_for(self.proc.wait(), 10)

    async def terminate(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                await self.kill()
