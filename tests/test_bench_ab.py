"""The A/B bench (`effectgate_lab.bench.ab`) works: two trees' gateways, the floors, every path
measured in each run, and the ratios it summarises computed from those figures. (Speed is read
from the bench, never asserted here.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from effectgate_lab.bench.ab import parse_side
from effectgate_lab.bench.ab_report import FSYNC, doc_block, render, spread, summary
from effectgate_lab.chaos.reporting import docs_blocks

ROOT = Path(__file__).resolve().parents[1]


def test_two_trees_side_by_side_in_every_run(tmp_path: Path, own_tmpdir: Path) -> None:
    out = tmp_path / "ab.json"
    args = ["--base", str(ROOT), "--tree", str(ROOT), "--side", f"quiet={ROOT}:LOG_LEVEL=WARNING"]
    args += ["--runs", "2", "--rounds", "2", "--n", "40", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "effectgate_lab.bench.ab", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Its working directory (stores, logs; a PostgreSQL cluster's) is gone with the run.
    assert not list(own_tmpdir.iterdir()), list(own_tmpdir.iterdir())
    doc = json.loads(out.read_text())
    assert len(doc["runs"]) == 2
    for figures in doc["runs"]:
        seen = {(f["path"], f["setup"], f["concurrency"]) for f in figures}
        for c in (1, 16):
            assert {("direct", "stripe simulator", c), ("echo", "bare grpc.aio", c)} <= seen
            for side in ("base", "this", "quiet"):
                assert {("new", side, c), ("replay", side, c)} <= seen
        assert ("fsync", FSYNC, 1) in seen  # the storage floor (no server: no CPU figure)
        assert all(f["calls"] > 0 and f["per_s"] > 0 for f in figures)
        assert all(f["server_cpu_us"] is not None for f in figures if f["path"] != "fsync")
    ratios = doc["summary"]["ratios"]
    # The base against itself is exactly 1; another side's ratio is its own CPU over the base's.
    assert ratios["base"]["new: gateway CPU per action / base's, c=1"]["median"] == 1.0
    first = doc["runs"][0]
    cpu = {f["setup"]: f["server_cpu_us"] for f in first if f["path"] == "new" and f["concurrency"] == 16}
    assert ratios["this"]["new: gateway CPU per action / base's, c=16"]["n"] == 2
    assert cpu["base"] > 0 and cpu["this"] > 0
    assert "replay calls/s / echo, c=16" in done.stdout and render(doc) == done.stdout.rstrip("\n")


def test_spread_and_sides() -> None:
    assert spread([3.0, None, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert spread([None]) is None
    side = parse_side("traced=/tmp/x:OTLP,A=b")
    assert side.name == "traced" and side.tree == Path("/tmp/x") and side.traced and ("A", "b") in side.env
    doc = {
        "options": {"sides": [{"name": "base", "env": {}}, {"name": "this", "env": {}}]},
        "runs": [
            [
                {"path": p, "setup": s, "concurrency": c, "per_s": v, "p50_ms": 1.0, "p99_ms": 2.0, "server_cpu_us": v}
                for c in (1, 16)
                for p, s, v in (
                    ("direct", "stripe simulator", 100.0),
                    ("echo", "bare grpc.aio", 200.0),
                    ("new", "base", 50.0),
                    ("replay", "base", 180.0),
                    ("new", "this", 25.0),
                    ("replay", "this", 190.0),
                    ("fsync", FSYNC, 1000.0),
                )
            ]
        ],
    }
    ratios = summary(doc)["ratios"]
    assert ratios["this"]["new: gateway CPU per action / base's, c=1"]["median"] == 0.5
    assert ratios["this"]["replay calls/s / echo, c=16"]["median"] == 0.95
    assert ratios["this"]["new calls/s / min(echo, direct), c=16"]["median"] == 0.25
    # Every p50 is 1 ms: a new action against direct + echo + two fsyncs.
    assert ratios["this"]["new p50 / (direct + echo + 2 fsync) p50s, c=1"]["median"] == 0.25


def test_the_benchmarks_page_states_the_committed_run() -> None:
    # docs/benchmarks.md's run and targets table are rendered from docs/bench-run.json
    # (`python -m effectgate_lab.bench.ab --render docs/bench-run.json --write docs/benchmarks.md`).
    doc = json.loads((ROOT / "docs" / "bench-run.json").read_text())
    doc["summary"] = summary(doc)
    found = docs_blocks.blocks((ROOT / "docs" / "benchmarks.md").read_text(), tag="bench")
    assert set(found) == {"run", "targets"}
    for name, body in found.items():
        assert body == doc_block(doc, name), f"docs/benchmarks.md's {name} block is not the committed run's"
