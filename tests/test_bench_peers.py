"""The engines' bench (`effectgate_lab.bench.peers`) works: every path (the direct call,
effectgate on SQLite and PostgreSQL, Restate, DBOS on SQLite and PostgreSQL) makes its effects at
both concurrencies in one run. (Speed is read from the bench, never asserted here.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from effectgate_lab.bench.peers import CONCURRENCY
from effectgate_lab.bench.peers_report import TAG, block, render
from effectgate_lab.chaos.reporting import docs_blocks

ROOT = Path(__file__).resolve().parents[1]
PATHS = {"direct", "effectgate sqlite", "effectgate postgres", "restate", "dbos sqlite", "dbos postgres"}


@pytest.mark.timeout(400)
def test_every_path_makes_its_effects_side_by_side(tmp_path: Path, pg_bindir: Path, own_tmpdir: Path) -> None:
    out = tmp_path / "peers.json"
    done = subprocess.run(
        [sys.executable, "-m", "effectgate_lab.bench.peers", "--n", "16", "--rounds", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=380,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Its working directory (stores, logs; a PostgreSQL cluster's) is gone with the run.
    assert not list(own_tmpdir.iterdir()), list(own_tmpdir.iterdir())
    doc = json.loads(out.read_text())
    seen = {(f["setup"], f["concurrency"]) for f in doc["figures"]}
    assert seen == {(p, c) for p in PATHS for c in CONCURRENCY}
    assert all(f["calls"] == 16 and f["per_s"] > 0 for f in doc["figures"])
    assert render(doc) == done.stdout.rstrip("\n")


def test_the_docs_block_is_the_committed_run() -> None:
    doc = json.loads((ROOT / "docs" / "bench-peers-run.json").read_text())
    found = docs_blocks.blocks((ROOT / "docs" / "benchmarks.md").read_text(), tag=TAG)
    assert found["run"] == block(doc), (
        "regenerate with `python -m effectgate_lab.bench.peers --render docs/bench-peers-run.json "
        "--write docs/benchmarks.md`"
    )
    assert {f["setup"] for f in doc["figures"]} == PATHS
