"""`python -m tests.sim.campaign --seeds N --seed S --jobs J --ledger FILE` (`make sim-campaign`):
one long run of the simulator (the million-seed run), in chunks that J processes share, resumable.

Each chunk that ends is one JSON line in the ledger: its seeds, events, fault counts, the seeds
that violated something (each with the command that replays it), its CPU seconds and the digest
over its seeds' traces in order, the very digest `make sim SEEDS=<chunk> SEED=<first>` prints, so
any chunk can be checked alone. Started again, it runs only the chunks the ledger lacks: a run
may span days, sessions and machines, and a larger `--seeds` extends it. The ledger's first line
pins the commit, the chunk size and the first seed; a ledger written by another commit or with
another chunking is refused (its worlds would not be the same). A worktree checked out at one
commit keeps a run going across changes elsewhere.

The last line printed: `campaign: N seeds, E events, V violations, digest HEX`, the digest over
the chunks' digests in order.

`--check K --ledger FILE` runs K of the ledger's chunks again on this tree, whatever commit wrote
the ledger (the first, the last and others spread between), and compares each digest with the
ledger's: the same digests say this tree simulates those worlds event for event as the run's
commit did. Its last line: `campaign check: K chunks, M match, D differ`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.sim import run

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 1000
# A worker process is replaced after this many chunks: a long run's memory stays flat.
CHUNKS_PER_WORKER = 20


def commit() -> str:
    """The commit the simulator runs, with `+dirty` when the tree has uncommitted changes."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


def run_chunk(first: int, seeds: int) -> dict[str, Any]:
    """One chunk's ledger line (in a worker process)."""
    started = time.process_time()
    outcomes, digest = run.run(seeds, first)
    counts: Counter[str] = Counter()
    failing: list[dict[str, Any]] = []
    for outcome in outcomes:
        counts.update(outcome.counts)
        if outcome.violations:
            failing.append(
                {"seed": outcome.seed, "violations": outcome.violations, "replay": run.replay_command(outcome.seed)}
            )
    events = counts.pop("events", 0)
    return {
        "first": first,
        "seeds": seeds,
        "events": events,
        "violations": sum(len(f["violations"]) for f in failing),
        "failing": failing,
        "faults": dict(sorted(counts.items())),
        "cpu": round(time.process_time() - started, 3),
        "digest": digest,
    }


def _run_chunk(job: tuple[int, int]) -> dict[str, Any]:
    return run_chunk(*job)


class Ledger:
    """The file of a run: a header line, then one line a chunk (in the order they ended)."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self.header = header
        self.chunks: dict[int, dict[str, Any]] = {}

    def open(self) -> str:
        """Reads what is there ("" when it can go on, else why not) or starts the file."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            self.path.write_text(json.dumps({"ledger": self.header}) + "\n")
            return ""
        lines = self.path.read_text().splitlines()
        found = json.loads(lines[0]).get("ledger", {})
        if found != self.header:
            return f"{self.path} belongs to another run: {found} (this one: {self.header}); give another --ledger"
        for line in lines[1:]:
            if line.strip():
                chunk = json.loads(line)
                self.chunks[chunk["first"]] = chunk
        return ""

    def add(self, chunk: dict[str, Any]) -> None:
        self.chunks[chunk["first"]] = chunk
        with self.path.open("a") as f:
            f.write(json.dumps(chunk, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())


def chunks(first: int, seeds: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(first, first + seeds, size):
        yield start, min(size, first + seeds - start)


def summary(ledger: Ledger, first: int, seeds: int, size: int) -> tuple[list[str], int]:
    """The report of the chunks done so far in this run's range, in order; and its violations."""
    done = [ledger.chunks[s] for s, n in chunks(first, seeds, size) if s in ledger.chunks]
    faults: Counter[str] = Counter()
    digest = hashlib.sha256()
    for chunk in done:
        faults.update(chunk["faults"])
        digest.update(chunk["digest"].encode())
    total = sum(c["seeds"] for c in done)
    events = sum(c["events"] for c in done)
    violations = sum(c["violations"] for c in done)
    cpu = sum(c["cpu"] for c in done)
    lines = [f"failing seed {f['seed']}: {f['violations']} -> {f['replay']}" for c in done for f in c["failing"]]
    lines.append("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())))
    rate = total / cpu * 60 if cpu else 0.0
    lines.append(f"cpu: {cpu:.0f}s over the chunks, {rate:.0f} seeds/min a process, {len(done)} chunks")
    lines.append(f"commit: {ledger.header['commit']}, ledger {ledger.path}")
    missing = seeds - total
    if missing:
        lines.append(f"not run yet: {missing} seeds (run the same command again to go on)")
    lines.append(f"campaign: {total} seeds, {events} events, {violations} violations, digest {digest.hexdigest()}")
    return lines, violations


def sampled(firsts: list[int], count: int) -> list[int]:
    """`count` of the chunks (by first seed, in order): the first, the last and others evenly between."""
    if count >= len(firsts):
        return firsts
    if count == 1:
        return firsts[:1]
    step = (len(firsts) - 1) / (count - 1)
    return sorted({firsts[round(i * step)] for i in range(count)})


def check(path: Path, count: int, jobs: int) -> int:
    """Runs `count` chunks of the ledger at `path` again here and compares their digests (see the
    module's docstring); 0 when every one matches."""
    lines = path.read_text().splitlines()
    header = json.loads(lines[0]).get("ledger", {})
    kept = {c["first"]: c for c in (json.loads(line) for line in lines[1:] if line.strip())}
    chosen = [kept[f] for f in sampled(sorted(kept), count)]
    print(f"campaign check: {len(chosen)} of {len(kept)} chunks written at {header.get('commit')}", file=sys.stderr)
    context = multiprocessing.get_context("fork")
    with context.Pool(jobs) as pool:
        again = pool.map(_run_chunk, [(c["first"], c["seeds"]) for c in chosen])
    differ = 0
    for old, new in zip(chosen, again, strict=True):
        same = (old["digest"], old["events"]) == (new["digest"], new["events"])
        differ += not same
        verdict = "match" if same else f"DIFFERS: {new['digest']} ({new['events']} events here)"
        print(f"chunk {old['first']}+{old['seeds']}: {old['digest'][:16]} {verdict}")
    print(f"commit here: {commit()}")
    print(f"campaign check: {len(chosen)} chunks, {len(chosen) - differ} match, {differ} differ")
    return 1 if differ or not chosen else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=run.SEED)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--chunk", type=int, default=CHUNK, help="seeds a chunk (fixed for a ledger)")
    parser.add_argument("--ledger", type=Path, default=Path("sim-campaign.jsonl"))
    parser.add_argument("--max-chunks", type=int, default=0, help="stop after this many new chunks (0: all)")
    parser.add_argument("--check", type=int, default=0, help="run this many of the ledger's chunks again and compare")
    args = parser.parse_args(argv)
    if args.check:
        if not args.ledger.exists():
            parser.error(f"--check: no ledger at {args.ledger}")
        return check(args.ledger, args.check, args.jobs)
    if args.seeds < 1 or args.chunk < 1 or args.jobs < 1:
        parser.error("--seeds, --chunk and --jobs must be at least 1")
    ledger = Ledger(args.ledger, {"commit": commit(), "first": args.seed, "chunk": args.chunk})
    refused = ledger.open()
    if refused:
        print(refused, file=sys.stderr)
        return 2
    todo = [c for c in chunks(args.seed, args.seeds, args.chunk) if c[0] not in ledger.chunks]
    if args.max_chunks:
        todo = todo[: args.max_chunks]
    print(f"campaign: {len(todo)} chunks to run in {args.jobs} process(es)", file=sys.stderr, flush=True)
    if todo:
        context = multiprocessing.get_context("fork")  # the parent has no threads; the children start warm
        with context.Pool(args.jobs, maxtasksperchild=CHUNKS_PER_WORKER) as pool:
            for n, chunk in enumerate(pool.imap_unordered(_run_chunk, todo), 1):
                ledger.add(chunk)
                print(
                    f"chunk {chunk['first']}+{chunk['seeds']}: {chunk['violations']} violations,"
                    f" {chunk['cpu']:.0f}s ({n}/{len(todo)})",
                    file=sys.stderr,
                    flush=True,
                )
    lines, violations = summary(ledger, args.seed, args.seeds, args.chunk)
    print("\n".join(lines))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
