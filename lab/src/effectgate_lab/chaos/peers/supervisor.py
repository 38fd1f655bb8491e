"""An engine's worker process, kept alive: started on a port of its own, restarted on that port
whenever it dies (a crash the harness asked for), so the engine can recover what it left."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path

from effectgate_lab.labkit.children import Child, free_port

ANNOUNCE = r"worker listening on port (\d+)"


class Worker:
    """`python -m MODULE --port P ARGS…`; `crash_after` lists, per life, after which provider
    answer the worker dies at the step's dangerous point (none: it never does)."""

    def __init__(self, module: str, args: Sequence[str], log: Path, crash_after: Sequence[int] = ()) -> None:
        self.module, self.args, self.log = module, list(args), log
        self.port = free_port()
        self.crash_after = list(crash_after)
        self.deaths = 0
        self._child: Child | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False
        self.ready = asyncio.Event()

    @property
    def pid(self) -> int:
        assert self._child is not None, "not started"
        return self._child.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        await self._launch()
        self._watch = asyncio.create_task(self._watchdog())

    async def _launch(self) -> None:
        for attempt in range(3):
            args = ["--port", str(self.port), *self.args]
            if self.deaths < len(self.crash_after):
                args += ["--crash-after", str(self.crash_after[self.deaths])]
            self._child = Child(self.module, args, announce=ANNOUNCE, stderr_path=self.log)
            try:
                await self._child.start(timeout=120)
                break
            except (RuntimeError, TimeoutError):
                await self._child.stop()
                if attempt == 2:
                    raise
                if not self.ready.is_set() and self.deaths == 0:
                    # Never served yet, so nobody knows its port: another process on a busy
                    # machine may have taken the one picked for it. Pick another.
                    self.port = free_port()
                await asyncio.sleep(1.0)  # a restart's port still held by the dead one: try again
        self.ready.set()

    async def _watchdog(self) -> None:
        while not self._stopping:
            assert self._child is not None and self._child.proc is not None
            await self._child.proc.wait()
            if self._stopping:
                return
            self.ready.clear()
            self.deaths += 1
            await self._launch()

    async def stop(self) -> None:
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._child is not None:
            await self._child.stop()
