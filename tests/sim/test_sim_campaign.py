"""The long run (`make sim-campaign`): chunks shared by processes give the digests `make sim`
gives for the same seeds, a second start runs only what the ledger lacks, a ledger of another
run is refused, and `--check` runs a ledger's chunks again and names any whose digest differs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.sim import campaign, run

ROOT = Path(__file__).resolve().parents[2]


def _campaign(ledger: Path, seeds: int, *more: str) -> subprocess.CompletedProcess[str]:
    args = ["--seeds", str(seeds), "--seed", "3", "--chunk", "2", "--jobs", "2", "--ledger", str(ledger), *more]
    return subprocess.run(
        [sys.executable, "-m", "tests.sim.campaign", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=280,
    )


def test_chunks_in_two_processes_give_make_sims_digests_and_a_second_start_goes_on(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    first = _campaign(ledger, 4)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "2 chunks to run in 2 process(es)" in first.stderr
    extended = _campaign(ledger, 6)
    assert extended.returncode == 0, extended.stderr[-2000:]
    assert "1 chunks to run" in extended.stderr  # seeds 3-6 were in the ledger already
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert lines[0]["ledger"] == {"commit": campaign.commit(), "first": 3, "chunk": 2}
    chunks = {line["first"]: line for line in lines[1:]}
    assert sorted(chunks) == [3, 5, 7]
    for first_seed, chunk in chunks.items():
        outcomes, digest = run.run(2, first_seed)
        assert chunk["digest"] == digest
        assert chunk["events"] == sum(o.counts["events"] for o in outcomes)
        assert chunk["violations"] == 0 and chunk["failing"] == []
    last = extended.stdout.strip().splitlines()[-1]
    assert last.startswith(f"campaign: 6 seeds, {sum(c['events'] for c in chunks.values())} events, 0 violations")


def test_a_ledger_of_another_commit_or_chunking_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps({"ledger": {"commit": "0" * 40, "first": 1, "chunk": 1000}}) + "\n")
    refused = campaign.Ledger(path, {"commit": campaign.commit(), "first": 1, "chunk": 1000}).open()
    assert "belongs to another run" in refused
    assert campaign.Ledger(path, {"commit": "0" * 40, "first": 1, "chunk": 1000}).open() == ""
    assert campaign.Ledger(path, {"commit": "0" * 40, "first": 1, "chunk": 500}).open() != ""


def test_a_check_runs_chunks_again_and_names_one_whose_digest_differs(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    assert _campaign(ledger, 6).returncode == 0
    lines = ledger.read_text().splitlines()
    header = json.loads(lines[0])
    header["ledger"]["commit"] = "0" * 40  # written at another commit: a check still reads it
    ledger.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    checked = _campaign(ledger, 6, "--check", "2")
    assert checked.returncode == 0, checked.stdout + checked.stderr[-2000:]
    assert "2 of 3 chunks written at " + "0" * 40 in checked.stderr
    assert checked.stdout.strip().splitlines()[-1] == "campaign check: 2 chunks, 2 match, 0 differ"
    assert [line.split(":")[0] for line in checked.stdout.splitlines()[:2]] == ["chunk 3+2", "chunk 7+2"]
    chunks = [json.loads(line) for line in lines[1:]]
    tampered = next(c for c in chunks if c["first"] == 7)
    tampered["digest"] = "f" * 64
    ledger.write_text("\n".join([json.dumps(header), *(json.dumps(c) for c in chunks)]) + "\n")
    differs = _campaign(ledger, 6, "--check", "3")
    assert differs.returncode == 1
    assert "chunk 7+2: ffffffffffffffff DIFFERS: " in differs.stdout
    assert differs.stdout.strip().splitlines()[-1] == "campaign check: 3 chunks, 2 match, 1 differ"


def test_the_chunks_a_check_samples() -> None:
    firsts = [1, 1001, 2001, 3001, 4001]
    assert campaign.sampled(firsts, 2) == [1, 4001]
    assert campaign.sampled(firsts, 3) == [1, 2001, 4001]
    assert campaign.sampled(firsts, 9) == firsts
    assert campaign.sampled(firsts, 1) == [1]
