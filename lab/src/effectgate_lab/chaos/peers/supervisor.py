"""An engine's worker process, kept alive: serving on a port its supervisor holds, restarted on
that port whenever it dies (a crash the harness asked for), so the engine can recover what it left.

The supervisor binds the port and hands the worker the listening socket (`--fd`), as socket
activation does: no other process can take the port between a death and the restart (a port
freed meanwhile can be taken by anyone on a busy machine), and while no worker runs the port
refuses connections (labkit/held_port.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path

from effectgate_lab.labkit.children import Child
from effectgate_lab.labkit.held_port import HeldPort

ANNOUNCE = r"worker listening on port (\d+)"


class Worker:
    """`python -m MODULE --port P --fd N ARGS…`; `crash_after` lists, per life, after which
    provider answer the worker dies at the step's dangerous point (none: it never does)."""

    def __init__(self, module: str, args: Sequence[str], log: Path, crash_after: Sequence[int] = ()) -> None:
        self.module, self.args, self.log = module, list(args), log
        self._held = HeldPort()
        self.port = self._held.port
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
        listening = self._held.listen()
        args = ["--port", str(self.port), "--fd", str(listening.fileno()), *self.args]
        if self.deaths < len(self.crash_after):
            args += ["--crash-after", str(self.crash_after[self.deaths])]
        self._child = Child(self.module, args, announce=ANNOUNCE, stderr_path=self.log, pass_fds=[listening.fileno()])
        try:
            await self._child.start(timeout=120)
        except BaseException:
            await self._child.stop()
            self._held.pause()
            raise
        self.ready.set()

    async def _watchdog(self) -> None:
        while not self._stopping:
            assert self._child is not None and self._child.proc is not None
            await self._child.proc.wait()
            if self._stopping:
                return
            self._held.pause()  # refused until the next worker serves; the port stays ours
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
        self._held.close()
