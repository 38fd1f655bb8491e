"""Child processes that announce themselves on their first stdout line (a port or a URL), for
benchmarks that keep every server in its own process."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) spent so far by a live process and its live descendants (the
    workers of `serve --workers N`), from /proc (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    spent: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        # Fields after the command name (which may hold spaces): state, ppid, ..., utime, stime.
        fields = stat[stat.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        spent[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += spent.get(current, 0.0)
        todo.extend(children.get(current, []))
    return total


def rss_bytes(pid: int) -> int:
    """Resident set size of a live process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Child:
    """`python -m MODULE ARGS…`; `start()` returns the first match of `announce` on stdout."""

    def __init__(
        self,
        module: str,
        args: Sequence[str],
        *,
        announce: str,
        env: Mapping[str, str] | None = None,
        stderr_path: Path | None = None,
        pass_fds: Sequence[int] = (),
    ) -> None:
        self.argv = [sys.executable, "-m", module, *args]
        self.pass_fds = tuple(pass_fds)  # descriptors the child inherits (a listening socket)
        self.announce = re.compile(announce)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.stderr_path = stderr_path
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    async def start(self, timeout: float = 60.0) -> str:
        stderr = self.stderr_path.open("ab") if self.stderr_path else asyncio.subprocess.DEVNULL
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdout=asyncio.subprocess.PIPE, stderr=stderr, env=self.env, pass_fds=self.pass_fds
        )
        assert self.proc.stdout is not None
        line = (await asyncio.wait_for(self.proc.stdout.readline(), timeout)).decode()
        found = self.announce.search(line)
        if found is None:
            await self.stop()
            raise RuntimeError(f"{' '.join(self.argv[2:4])} did not start: {line!r}{self._stderr_tail()}")
        return found.group(1)

    def _stderr_tail(self, size: int = 2000) -> str:
        """The end of what the child wrote to its stderr file: why it did not start."""
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        return "; its stderr ends: " + self.stderr_path.read_bytes()[-size:].decode(errors="replace")

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 15)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
