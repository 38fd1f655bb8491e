"""The benchmark itself works: every path runs against real child processes and the JSON it
writes holds every figure and target. (Speed is read from `make bench`, never asserted here.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(360)  # the quick bench's own bound is 300 s; ~70 s on a machine at load 4
def test_quick_bench_measures_every_path_and_writes_json(tmp_path: Path, own_tmpdir: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "effectgate_lab.bench", "--quick", "--concurrency", "1,16", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Its working directory (stores, logs; a PostgreSQL cluster's) is gone with the run.
    assert not list(own_tmpdir.iterdir()), list(own_tmpdir.iterdir())
    doc = json.loads(out.read_text())
    seen = {(f["path"], f["setup"].split(",")[0], f["concurrency"]) for f in doc["figures"]}
    for c in (1, 16):
        assert ("direct", "stripe simulator", c) in seen
        assert ("echo", "bare grpc.aio", c) in seen
        for store in ("sqlite FULL", "sqlite NORMAL"):
            for path in ("new", "replay", "duplicate"):
                assert (path, store, c) in seen
    if not any("PostgreSQL skipped" in note for note in doc["notes"]):
        assert ("new", "postgres", 1) in seen
    assert {("new", "scale: sqlite FULL", 1), ("replay", "scale: sqlite FULL", 16)} <= seen
    assert {("new", "tracing off: sqlite FULL", 1), ("replay", "tracing on: sqlite FULL", 16)} <= seen
    assert {("new", "1 process: sqlite FULL", 16), ("replay", "2 processes: sqlite FULL", 16)} <= seen
    assert any("OTLP receiver got" in note and "'spans': 0" not in note for note in doc["notes"])
    assert all(f["calls"] > 0 and f["per_s"] > 0 and f["p99_ms"] >= f["p50_ms"] for f in doc["figures"])
    # Each path's serving process is known and its CPU time read (a new action costs the gateway
    # well over a millisecond, so 40 of them are many clock ticks).
    assert all(f["server_cpu_us"] is not None and f["server_cpu_us"] >= 0 for f in doc["figures"])
    assert all(f["server_cpu_us"] > 0 for f in doc["figures"] if f["path"] == "new")
    assert doc["rss"]["requests"] == 400 and doc["rss"]["rss_end_mb"] > 0
    names = [t["name"] for t in doc["targets"]]
    assert any(n.startswith("replay calls/s / echo") for n in names) and any(n.startswith("RSS growth") for n in names)
    assert all(t["value"] is not None for t in doc["targets"])
    assert doc["machine"]["cores"] and doc["machine"]["commit"]
    assert "targets:" in done.stdout
