"""How `effectgate serve` runs its process (gateway/runtime/process.py): on uvloop's event loop
when uvloop is installed (it is, with the `speed` extra the dev install pulls in), and with the
heap frozen and the young generation's threshold raised once start-up is done; the cyclic
collector is off only while a start-up step loads modules, and on while serving. Checked in a
child interpreter, so this test process keeps its own loop and collector settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.harness import API_KEY_ENV

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


PAUSED = """
import gc, json
from effectgate.gateway.runtime import process

seen = {}
with process.collector_paused():
    seen["inside"] = gc.isenabled()
try:
    with process.collector_paused():
        raise KeyboardInterrupt  # Ctrl-C while modules load
except KeyboardInterrupt:
    pass
seen["after"] = gc.isenabled()
gc.disable()
with process.collector_paused():
    pass
seen["kept_off"] = not gc.isenabled()
print(json.dumps(seen))
"""

# A real `effectgate serve` (its entry point, in this child): once its heap is settled, is the
# collector on? Then it stops itself as a supervisor would (SIGTERM).
SERVING = """
import gc, json, os, signal, sys, threading, time
from effectgate.gateway.runtime.entry import main

seen = {}
def watch():
    end = time.monotonic() + 120
    while gc.get_freeze_count() == 0 and time.monotonic() < end:  # settle_heap: start-up done
        time.sleep(0.05)
    seen["on_while_serving"] = gc.isenabled()
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=watch, daemon=True).start()
sys.argv = ["effectgate", "--log-level", "WARNING", "serve", "--config", sys.argv[1]]
code = main()
print(json.dumps({**seen, "code": code}))
"""


def test_the_collector_is_off_only_inside_a_start_up_step() -> None:
    done = subprocess.run([sys.executable, "-c", PAUSED], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == {"inside": False, "after": True, "kept_off": True}


def test_a_started_gateway_serves_with_the_collector_on(tmp_path: Path) -> None:
    config = tmp_path / "effectgate.toml"
    config.write_text(
        f'[server]\nlisten = "127.0.0.1:0"\nshutdown_grace = "1s"\n[store]\nurl = "sqlite:///{tmp_path}/eg.db"\n'
        f'[adapters.stripe]\napi_base = "http://127.0.0.1:9"\napi_key_env = "{API_KEY_ENV}"\n'
        '[tools.charge_card]\nadapter = "stripe"\n'
    )
    done = subprocess.run(
        [sys.executable, "-c", SERVING, str(config)], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"on_while_serving": True, "code": 0}, done.stdout
