"""The down-sink bench (`effectgate_lab.bench.notify_down`) works: both gateways measured side by
side in each run, the ratios b/a made of those figures, (b)'s backlog pending while the sink is
down and every notification of it delivered once it comes up. (Speed is read from the bench,
never asserted here.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from effectgate_lab.bench.notify_down import BASE, CONTROL, DOWN
from effectgate_lab.bench.notify_report import render

ROOT = Path(__file__).resolve().parents[1]
SEED = 30


def test_both_sides_measured_and_the_backlog_delivered_after(tmp_path: Path, own_tmpdir: Path) -> None:
    out = tmp_path / "notify.json"
    args = ["--n", "20", "--rounds", "1", "--runs", "1", "--seed", str(SEED), "--timeout", "1", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "effectgate_lab.bench.notify_down", *args],
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
    [run] = doc["runs"]
    seen = {(f["path"], f["setup"], f["concurrency"]) for f in run["figures"]}
    assert seen == {(p, s, c) for p in ("new", "replay") for s in (BASE, DOWN, CONTROL) for c in (1, 16)}
    assert all(f["calls"] == 20 and f["per_s"] > 0 and f["server_cpu_us"] is not None for f in run["figures"])
    facts = run["notify"]
    # Down while measuring: the whole backlog stayed in the outbox, failing and retrying.
    assert facts["seeded"] == SEED and facts["pending_before"] == SEED and facts["pending_after_measuring"] == SEED
    assert facts["most_attempts_before"] >= 1
    # Up: every one of them delivered (distinct webhook-ids, signatures checked), the outbox empty.
    after = facts["after"]
    assert after["delivered"] == SEED and after["approval_waiting"] == SEED
    assert after["pending_after"] == 0 and after["failed_after"] == 0
    summary = doc["summary"]
    assert summary["delivered_after"] is True
    new1 = next(r for r in summary["figures"] if r["path"] == "new" and r["concurrency"] == 1)
    new = {f["setup"]: f for f in run["figures"] if f["path"] == "new" and f["concurrency"] == 1}
    a, b, a2 = new[BASE], new[DOWN], new[CONTROL]
    assert new1["b/a"]["per_s"]["median"] == b["per_s"] / a["per_s"]  # within the run, b over a
    assert new1["a2/a"]["per_s"]["median"] == a2["per_s"] / a["per_s"]  # the control: a like gateway
    assert "delivered after: yes" in done.stdout and render(doc) == done.stdout.rstrip("\n")
