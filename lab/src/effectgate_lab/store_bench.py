# ~400 lines on purpose: one lab script read top to bottom (workers, backends, report); no part of it is used elsewhere.
"""Store micro-benchmark: the store API driven directly by N concurrent writers, no gRPC.

Operations (each timed from call to answer):
- `new`: a new action the way the protocol writes one: insert it already DISPATCHED under its
  lease, then settle it (CONFIRMED, lease released): two durable writes;
- `lease`: take the lease of an existing, free action;
- `get`: read one existing action by id.

Backends: SQLite `synchronous=FULL` and `NORMAL` (fresh file each), PostgreSQL (the server in
EFFECTGATE_TEST_PG_DSN, or a throw-away cluster started like the tests do, when run from the
repository root). `--before REF` also runs the store of an older commit (checked out with
`git archive` into a temporary directory and put first on the import path of a child process)
and prints both side by side (the old code's own dependencies must be installed: 548605c's
SQLite store needs `pip install aiosqlite`). `--preload N` loads N actions through
`Store.insert_many` and reports `new` and `get` at 1 k stored actions against N. Each figure
also gives the process CPU per operation, steadier than wall-clock figures on a busy machine.

Usage: python -m effectgate_lab.store_bench [--n 1000] [--concurrency 1,16,64] [--before 548605c]
       [--backends sqlite-full,sqlite-normal,postgres] [--preload 1000000] [--repeat 3]
       [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from effectgate.adapters.base import Receipt
from effectgate.gateway.model import ActionRecord, State
from effectgate.gateway.store import Store, open_store

BACKENDS = ("sqlite-full", "sqlite-normal", "postgres")
LEASE_TTL = 30.0
Result = dict[str, Any]


def action(action_id: str, now: float, **changes: Any) -> ActionRecord:
    base = ActionRecord(
        action_id=action_id,
        tenant="acme",
        run_id=f"run-{action_id[:12]}",
        step_id="charge",
        tool="charge_card",
        scope="order:1093",
        payload_type="effectgate.tools.v1.ChargeCard",
        payload=b'\n\x07cus_123\x10\xf4\x03\x1a\x03usd"\x0cpm_card_visa',
        fingerprint="5f0c7e4bd1a2",
        state=State.PLANNED,
        created_at=now,
        updated_at=now,
    )
    return base.evolve(**changes)


def settled(record: ActionRecord, now: float) -> ActionRecord:
    receipt = Receipt("pi_3Q0abc", "req_9f8e", {"status": "succeeded", "amount": 500}, now)
    return record.evolve(state=State.CONFIRMED, receipt=receipt, lease_owner="", lease_expires_at=0.0, updated_at=now)


def summary(op: str, samples: list[float], wall: float, cpu: float) -> Result:
    ordered = sorted(samples)
    return {
        "op": op,
        "n": len(samples),
        "per_s": len(samples) / wall,
        # CPU of the whole process (every thread) per operation: steadier than wall-clock figures
        # on a shared machine, and what bounds throughput once the store stops waiting on I/O.
        "cpu_us": cpu / len(samples) * 1e6,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }


async def drive(op: str, n: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> Result:
    samples: list[float] = []
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            start = time.perf_counter()
            await one(i)
            samples.append(time.perf_counter() - start)

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return summary(op, samples, time.perf_counter() - wall, time.process_time() - cpu)


async def preload(store: Store, first: int, count: int, batch: int = 10_000) -> None:
    """Loads settled actions `first` .. `first + count - 1` through the store (bulk insert where
    the store has one)."""
    now = time.time() - 86_400
    done = 0
    while done < count:
        size = min(batch, count - done)
        records = [
            settled(action(f"pre-{first + done + i:09d}", now + (first + done + i) / 1000), now) for i in range(size)
        ]
        if hasattr(store, "insert_many"):
            await store.insert_many(records)
        else:  # an older store without the bulk helper
            for record in records:
                await store.insert_if_absent(record)
        done += size


async def scenarios(store: Store, n: int, concurrency: int, ops: tuple[str, ...]) -> list[Result]:
    owner = f"bench-{uuid.uuid4().hex[:6]}"
    tag = uuid.uuid4().hex[:8]
    results = []
    if "new" in ops:

        async def new(i: int) -> None:
            now = time.time()
            fresh = action(f"new-{tag}-{i}", now, state=State.DISPATCHED, attempts=1, dispatched_at=now)
            leased = fresh.evolve(fence=1, lease_owner=owner, lease_expires_at=now + LEASE_TTL)
            stored, inserted = await store.insert_if_absent(leased)
            assert inserted
            assert await store.update(settled(stored, time.time()))

        results.append(await drive("new", n, concurrency, new))
    if "lease" in ops:
        ids = [f"free-{tag}-{i}" for i in range(n)]
        for start in range(0, n, 5_000):
            await preload_free(store, ids[start : start + 5_000])

        async def lease(i: int) -> None:
            assert await store.acquire_lease(ids[i], owner, time.time(), LEASE_TTL) is not None

        results.append(await drive("lease", n, concurrency, lease))
    if "get" in ops:
        known = [f"new-{tag}-{i}" for i in range(n)] if "new" in ops else []
        rng = random.Random(7)

        async def get(i: int) -> None:
            if known:
                assert await store.get(rng.choice(known)) is not None
            else:
                await store.get(f"absent-{i}")

        results.append(await drive("get", n, concurrency, get))
    for result in results:
        result["c"] = concurrency
    return results


async def preload_free(store: Store, ids: list[str]) -> None:
    now = time.time()
    records = [action(i, now) for i in ids]
    if hasattr(store, "insert_many"):
        await store.insert_many(records)
    else:
        for record in records:
            await store.insert_if_absent(record)


@contextlib.asynccontextmanager
async def fresh_url(backend: str, pg_dsn: str) -> Any:
    """A store URL on an empty database of `backend`, removed afterwards."""
    if backend.startswith("sqlite"):
        sync = backend.split("-", 1)[1].upper()
        with tempfile.TemporaryDirectory(prefix="eg-store-bench-", dir=os.environ.get("EG_BENCH_DIR")) as tmp:
            yield f"sqlite:///{tmp}/bench.db?synchronous={sync}"
        return
    from urllib.parse import urlsplit, urlunsplit

    import asyncpg  # only the PostgreSQL runs need it

    name = f"eg_store_bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    try:
        yield urlunsplit(urlsplit(pg_dsn)._replace(path=f"/{name}"))
    finally:
        admin = await asyncpg.connect(pg_dsn)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def settle(url: str) -> None:
    """Lets the database finish the bulk load's background work (WAL checkpoint; PostgreSQL
    checkpoint and statistics), so the next figures are the steady state of a big store, not
    the tail of the load."""
    if url.startswith("sqlite"):
        path = url.split("sqlite:///", 1)[1].split("?", 1)[0]
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        return
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("VACUUM ANALYZE actions")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def run_worker(spec: Result) -> list[Result]:
    """One backend, one implementation (whatever `effectgate.gateway.store` imports as)."""
    import effectgate.gateway.store as implementation

    print(f"    store code: {Path(implementation.__file__).parent}", file=sys.stderr)
    results: list[Result] = []
    async with fresh_url(spec["backend"], spec.get("pg_dsn", "")) as url:
        store = open_store(url)
        await store.open()
        try:
            if spec["preload"]:
                await preload(store, 0, 1_000)
                for c in spec["concurrency"]:
                    for r in await scenarios(store, spec["n"], c, ("new", "get")):
                        results.append({**r, "stored": "1k"})
                start = time.perf_counter()
                await preload(store, 1_000, spec["preload"] - 1_000)
                loaded = time.perf_counter() - start
                await settle(url)
                for c in spec["concurrency"]:
                    for r in await scenarios(store, spec["n"], c, ("new", "get")):
                        results.append({**r, "stored": f"{spec['preload'] // 1000}k", "load_s": loaded})
            else:
                for c in spec["concurrency"]:
                    results.extend(await scenarios(store, spec["n"], c, ("new", "lease", "get")))
        finally:
            await store.close()
    for r in results:
        r["backend"] = spec["backend"]
    return results


@contextlib.contextmanager
def old_checkout(ref: str) -> Iterator[Path]:
    """`ref` as a directory: itself if it is one, else `git archive` of that commit."""
    if Path(ref).is_dir():
        yield Path(ref)
        return
    with tempfile.TemporaryDirectory(prefix="eg-before-") as tmp:
        archive = subprocess.run(["git", "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp)


def spawn(spec: Result, src: Path | None) -> list[Result]:
    env = dict(os.environ)
    if src is not None:
        # The old implementation's src/ first: `effectgate.gateway` resolves there.
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-m", "effectgate_lab.store_bench", "--worker", json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=7_200,
    )
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"bench worker failed: {done.stderr[-2000:]}")
    results = list(json.loads(done.stdout.strip().splitlines()[-1]))
    for r in results:
        r["impl"] = "before" if src is not None else "after"
    return results


@contextlib.contextmanager
def postgres(backends: list[str]) -> Iterator[str]:
    if "postgres" not in backends:
        yield ""
        return
    dsn = os.environ.get("EFFECTGATE_TEST_PG_DSN", "")
    if dsn:
        yield dsn
        return
    try:
        from tests import pg  # the repository's throw-away cluster (run from the repository root)
    except ImportError:
        raise SystemExit("postgres: set EFFECTGATE_TEST_PG_DSN or run from the repository root") from None
    bindir = pg.find_bindir()
    if bindir is None:
        raise SystemExit("postgres: no server binaries; set EFFECTGATE_TEST_PG_DSN")
    server = pg.start_server(bindir)
    try:
        yield server.dsn
    finally:
        server.destroy()


def medians(results: list[Result]) -> list[Result]:
    """One result per (backend, op, c, stored): the median of each figure over the rounds."""
    groups: dict[tuple[Any, ...], list[Result]] = {}
    for r in results:
        groups.setdefault((r["backend"], r["op"], r["c"], r.get("stored", "")), []).append(r)
    merged = []
    for runs in groups.values():
        figures = ("per_s", "p50_ms", "p99_ms", "cpu_us")
        merged.append({**runs[0], **{k: statistics.median(r[k] for r in runs) for k in figures}})
    return merged


def table(rows: list[Result], columns: list[str]) -> str:
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns]
    lines = [" | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(str(r.get(c, "")).ljust(w) for c, w in zip(columns, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def fmt(result: Result | None) -> dict[str, str]:
    if result is None:
        return {"ops/s": "-", "p50 ms": "-", "p99 ms": "-", "cpu us": "-"}
    return {
        "ops/s": f"{result['per_s']:.0f}",
        "p50 ms": f"{result['p50_ms']:.2f}",
        "p99 ms": f"{result['p99_ms']:.2f}",
        "cpu us": f"{result['cpu_us']:.0f}",
    }


def side_by_side(before: list[Result], after: list[Result]) -> list[Result]:
    def key(r: Result) -> tuple[Any, ...]:
        return (r["backend"], r["op"], r["c"], r.get("stored", ""))

    old = {key(r): r for r in before}
    rows = []
    for r in after:
        row: Result = {"backend": r["backend"], "op": r["op"], "c": r["c"]}
        if "stored" in r:
            row["stored"] = r["stored"]
        if before:
            row.update({f"before {k}": v for k, v in fmt(old.get(key(r))).items()})
        row.update({(f"after {k}" if before else k): v for k, v in fmt(r).items()})
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="effectgate_lab.store_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000, help="operations per figure")
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated writer counts")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--before", default="", help="commit (or checkout directory) to compare with")
    parser.add_argument("--preload", type=int, default=0, help="also report new/get at 1k vs N stored actions")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; each figure is the median")
    parser.add_argument("--json", default="", help="write the figures to this file")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(asyncio.run(run_worker(json.loads(args.worker)))))
        return 0
    backends = [b for b in args.backends.split(",") if b]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        parser.error(f"unknown backends {sorted(unknown)}; choose from {BACKENDS}")
    concurrency = [int(c) for c in args.concurrency.split(",")]
    report: Result = {"n": args.n, "concurrency": concurrency}
    with postgres(backends) as pg_dsn:
        spec = {"n": args.n, "concurrency": concurrency, "pg_dsn": pg_dsn, "preload": 0}
        before: list[Result] = []
        after: list[Result] = []
        with contextlib.ExitStack() as stack:
            old = stack.enter_context(old_checkout(args.before)) if args.before else None
            # Before and after alternate, so a busy minute on a shared machine hits both.
            for round_ in range(args.repeat):
                for backend in backends:
                    print(f"... {backend} (round {round_ + 1})", file=sys.stderr, flush=True)
                    if old is not None:
                        before += spawn({**spec, "backend": backend}, old / "src")
                    after += spawn({**spec, "backend": backend}, None)
        before, after = medians(before), medians(after)
        report.update(before=before, after=after)
        print(table(side_by_side(before, after), list(side_by_side(before, after)[0])))
        if args.preload:
            loaded: list[Result] = []
            for backend in backends:
                print(f"... {backend}: preloading {args.preload}", file=sys.stderr, flush=True)
                loaded += spawn({**spec, "backend": backend, "preload": args.preload}, None)
            report["preload"] = loaded
            rows = side_by_side([], loaded)
            print()
            print(table(rows, list(rows[0])))
            times = {r["backend"]: r["load_s"] for r in loaded if "load_s" in r}
            print("load time: " + ", ".join(f"{b} {t:.0f} s" for b, t in times.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
