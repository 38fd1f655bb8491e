"""`effectgate serve` (any options) as a child process whose stdout and stderr are kept line by
line, for the production-readiness tests (probes, logs, rotation, outages)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from effectgate_lab.chaos.config_writer import write_config
from tests.gateway_forks import AsyncForkedChild, eligible, spawn_gateway


class ServeChild:
    def __init__(
        self, args: Sequence[str], *, env: Mapping[str, str] | None = None, popen: Mapping[str, Any] | None = None
    ) -> None:
        """`popen`: more of subprocess.Popen's options for the child (`umask`, `preexec_fn`)."""
        self.args = list(args)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.popen = dict(popen or {})
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.proc: asyncio.subprocess.Process | AsyncForkedChild | None = None
        self._pumps: list[asyncio.Task[None]] = []

    @classmethod
    def for_config(
        cls, doc: Mapping[str, Any], path: Path, *options: str, before: Sequence[str] = (), **kw: Any
    ) -> ServeChild:
        write_config(doc, path)
        return cls([*before, "serve", "--config", str(path), *options], **kw)

    async def start(self) -> ServeChild:
        """A fork of the test's gateway driver (tests/gateway_forks.py) unless the options or the
        environment need a process of its own."""
        if not self.popen and eligible(self.env):
            self.proc = await spawn_gateway(self.args, self.env)
        else:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "effectgate.gateway", *self.args,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=self.env, **self.popen,
            )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._pumps = [
            asyncio.create_task(self._pump(self.proc.stdout, self.stdout)),
            asyncio.create_task(self._pump(self.proc.stderr, self.stderr)),
        ]
        return self

    @staticmethod
    async def _pump(stream: asyncio.StreamReader, into: list[str]) -> None:
        while line := await stream.readline():
            into.append(line.decode(errors="replace").rstrip("\n"))

    async def until(self, check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            found = check()
            if found:
                return found
            if self.proc is not None and self.proc.returncode is not None and not found:
                await asyncio.gather(*self._pumps)
                found = check()
                if found:
                    return found
                raise AssertionError(f"exited {self.proc.returncode} before {what}:\n" + self.transcript())
            if loop.time() > end:
                raise AssertionError(f"timed out waiting for {what}:\n" + self.transcript())
            await asyncio.sleep(0.05)

    async def ready(self, timeout: float = 60.0) -> int:
        return await self._announced(r"serving on port (\d+)", "the ready line", timeout)

    async def metrics_port(self, timeout: float = 60.0) -> int:
        """The metrics port it bound (`prometheus_listen = "127.0.0.1:0"`), from the line after
        its ready line."""
        return await self._announced(r"metrics on port (\d+)", "the metrics line", timeout)

    async def _announced(self, pattern: str, what: str, timeout: float) -> int:
        """The port a line of its stdout announces (waits for the line)."""

        def port() -> int:
            for line in self.stdout:
                found = re.search(pattern, line)
                if found:
                    return int(found.group(1))
            return 0

        return int(await self.until(port, what, timeout))

    def transcript(self) -> str:
        return "stdout:\n" + "\n".join(self.stdout) + "\nstderr:\n" + "\n".join(self.stderr)

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    async def stop(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        await asyncio.gather(*self._pumps)
        return int(self.proc.returncode or 0)

    async def exit_code(self, timeout: float = 90.0) -> int:
        assert self.proc is not None
        await asyncio.wait_for(self.proc.wait(), timeout)
        await asyncio.gather(*self._pumps)
        return int(self.proc.returncode or 0)

    def json_lines(self) -> list[dict[str, Any]]:
        """Every stdout and stderr line parsed as JSON (fails on the first line that is not)."""
        docs = []
        for line in [*self.stdout, *self.stderr]:
            if line.strip():
                doc = json.loads(line)
                assert isinstance(doc, dict), line
                docs.append(doc)
        return docs


async def http_get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.get(f"http://127.0.0.1:{port}{path}")


async def http_until(
    port: int, path: str, check: Callable[[httpx.Response], bool], what: str, timeout: float = 60.0
) -> httpx.Response:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        try:
            answer: httpx.Response | None = await http_get(port, path)
        except httpx.TransportError:
            answer = None
        if answer is not None and check(answer):
            return answer
        if loop.time() > end:
            last = "no answer" if answer is None else f"{answer.status_code} {answer.text}"
            raise AssertionError(f"timed out waiting for {what} on :{port}{path}; last: {last}")
        await asyncio.sleep(0.1)
