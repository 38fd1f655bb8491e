"""How `effectgate serve` runs its process (gateway/runtime/process.py): on uvloop's event loop
when uvloop is installed (it is, with the `speed` extra the dev install pulls in), and with the
heap frozen and the young generation's threshold raised once start-up is done. Checked in a
child interpreter, so this test process keeps its own loop and collector settings."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import asyncio, gc, json
from effectgate.gateway.runtime import process

async def main():
    return type(asyncio.get_running_loop()).__module__

loop_module = process.run(main())
before = gc.get_threshold()
process.settle_heap()
print(json.dumps({"loop": loop_module, "frozen": gc.get_freeze_count(), "before": before, "after": gc.get_threshold()}))
"""


def test_serve_runs_on_uvloop_and_settles_its_heap_after_start_up() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=True)
    seen = json.loads(done.stdout)
    assert seen["loop"].startswith("uvloop")
    assert seen["frozen"] > 1000  # the modules and objects alive after start-up
    assert seen["after"] == [20_000, seen["before"][1], seen["before"][2]]


def test_without_uvloop_serve_runs_on_asyncios_loop() -> None:
    # uvloop made unimportable in the child: the default loop, and the same run() contract.
    blocked = "import sys; sys.modules['uvloop'] = None\n" + CHILD
    done = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout)["loop"] == "asyncio.unix_events"
