"""`make bench-peers`: the cost of one effect through each engine teams pick instead, against the
direct call and effectgate, side by side in one run (interleaved rounds, `load.Interleaved`).

    python -m effectgate_lab.bench.peers [--n 400] [--rounds 5] [--json FILE]
    python -m effectgate_lab.bench.peers --render docs/bench-peers-run.json [--write docs/benchmarks.md]

One effect is one new Stripe charge at the Stripe simulator (its own process), made by:
- direct: a keep-alive POST with a fresh idempotency key (the floor);
- effectgate on SQLite FULL and on PostgreSQL: a new action through Execute (`effectgate serve`);
- restate: a new invocation of the chaos harness's handler through the Restate server's ingress
  (its own process), the provider call in `ctx.run` in the SDK worker (its own process);
- dbos on SQLite and on PostgreSQL: a new workflow (`SetWorkflowID`) in the chaos harness's DBOS
  worker (its own process), the provider call in a step.
Every durable store keeps its durability defaults; PostgreSQL (one cluster, a database each) runs
with fsync on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from effectgate_lab.bench import targets
from effectgate_lab.bench.load import Interleaved, One
from effectgate_lab.bench.peers_report import TAG, block, render
from effectgate_lab.chaos.peers.restate_server import RestateServer
from effectgate_lab.chaos.peers.supervisor import Worker
from effectgate_lab.chaos.reporting import docs_blocks
from effectgate_lab.chaos.reporting.record import machine
from effectgate_lab.labkit.postgres import find_bindir, start_server
from effectgate_lab.labkit.workdir import temporary_workdir

CONCURRENCY = (1, 16)
TYPED = {"customer": targets.FORM["customer"], "amount": int(targets.FORM["amount"]), "currency": "usd"}


def engine_body(sim_url: str) -> dict[str, Any]:
    return {"scenario": "charge_card", "base_url": sim_url, "typed": TYPED, "auth": targets.API_KEY}


class Paths:
    """Each path's one-effect call, and the process whose CPU it is charged with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, One, int | None]] = []
        self.http = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64))

    def add(self, name: str, one: One, pid: int | None) -> None:
        self.calls.append((name, one, pid))


async def gateway_path(stack: AsyncExitStack, paths: Paths, name: str, url: str, sim_url: str, work: Path) -> None:
    child = targets.gateway(url, sim_url, work, name.replace(" ", "-"))
    port = await child.start()
    stack.push_async_callback(child.stop)
    calls = targets.GatewayCalls(port)
    stack.push_async_callback(calls.close)
    tag = uuid.uuid4().hex[:8]

    async def one(i: int) -> None:
        await calls.execute(targets.execute_request(f"peers-{tag}-{i // 100}", f"step-{i % 100}"))

    paths.add(name, one, child.pid)


async def dbos_path(stack: AsyncExitStack, paths: Paths, name: str, db: str, sim_url: str, work: Path) -> None:
    worker = Worker("effectgate_lab.chaos.peers.dbos_worker", ["--db", db], work / f"{name.replace(' ', '-')}.log")
    await worker.start()
    stack.push_async_callback(worker.stop)
    tag = uuid.uuid4().hex[:8]
    body = engine_body(sim_url)

    async def one(i: int) -> None:
        reply = await paths.http.post(f"{worker.url}/call", json={"workflow_id": f"peers-{tag}-{i}", **body})
        reply.raise_for_status()
        assert reply.json()["told"] == "success", reply.text

    paths.add(name, one, worker.pid)


async def restate_path(stack: AsyncExitStack, paths: Paths, sim_url: str, work: Path) -> None:
    server = RestateServer()
    stack.push_async_callback(server.stop)  # removes its directory, started or not
    await server.start()
    worker = Worker("effectgate_lab.chaos.peers.restate_worker", [], work / "restate-worker.log")
    await worker.start()
    stack.push_async_callback(worker.stop)
    await server.register(worker.url)
    tag = uuid.uuid4().hex[:8]
    body = engine_body(sim_url)

    async def one(i: int) -> None:
        headers = {"idempotency-key": f"peers-{tag}-{i}"}
        reply = await paths.http.post(f"{server.ingress}/ChaosTool/call", json=body, headers=headers)
        reply.raise_for_status()
        assert reply.json()["told"] == "success", reply.text

    paths.add("restate", one, server.pid)


@asynccontextmanager
async def every_path(work: Path, postgres: bool) -> AsyncIterator[Paths]:
    os.environ[targets.KEY_ENV] = targets.API_KEY
    async with AsyncExitStack() as stack:
        sim = targets.simulator(work)
        sim_url = await sim.start()
        stack.push_async_callback(sim.stop)
        paths = Paths()
        stack.push_async_callback(paths.http.aclose)
        direct = targets.DirectCalls(sim_url)
        stack.push_async_callback(direct.close)
        paths.add("direct", direct.charge, sim.pid)
        await gateway_path(stack, paths, "effectgate sqlite", f"sqlite:///{work}/gateway.db", sim_url, work)
        bindir = find_bindir() if postgres else None
        pg = None
        if bindir is not None:
            pg = await asyncio.to_thread(start_server, bindir, fsync=True)
            stack.push_async_callback(asyncio.to_thread, pg.destroy)
            dsn = await fresh_database(pg.dsn, "gateway")
            await gateway_path(stack, paths, "effectgate postgres", dsn, sim_url, work)
        await restate_path(stack, paths, sim_url, work)
        await dbos_path(stack, paths, "dbos sqlite", f"sqlite:///{work}/dbos.sqlite", sim_url, work)
        if pg is not None:
            await dbos_path(stack, paths, "dbos postgres", await fresh_database(pg.dsn, "dbos"), sim_url, work)
        yield paths


async def fresh_database(admin_dsn: str, name: str) -> str:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return admin_dsn.rsplit("/", 1)[0] + f"/{name}"


async def measure(n: int, rounds: int, postgres: bool, concurrency: Sequence[int]) -> list[dict[str, Any]]:
    """Every path at every concurrency, in a directory removed after the run (kept, and named,
    when it fails)."""
    with temporary_workdir("effectgate-bench-peers-", "bench") as work:
        return await measured_in(work, n, rounds, postgres, concurrency)


async def measured_in(
    work: Path, n: int, rounds: int, postgres: bool, concurrency: Sequence[int]
) -> list[dict[str, Any]]:
    figures = []
    async with every_path(work, postgres) as paths:
        for _, one, _ in paths.calls:  # warm every path (connections, caches, first workflow)
            for i in range(5):
                await one(10_000_000 + i)
        for c in concurrency:
            side = Interleaved(c)
            for name, one, pid in paths.calls:
                side.add("effect", name, one, n, server_pid=pid)
            figures += [f.to_json() for f in await side.run(rounds)]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m effectgate_lab.bench.peers", description=__doc__)
    parser.add_argument("--n", type=int, default=400, help="effects per path and concurrency")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--render", type=Path, help="print a recorded run and exit")
    parser.add_argument("--write", type=Path, nargs="*", default=[], help="with --render: rewrite these files' block")
    args = parser.parse_args(argv)
    if args.render:
        doc = json.loads(args.render.read_text())
        if not args.write:
            print(render(doc))
        for path in args.write:
            path.write_text(docs_blocks.rewrite(path.read_text(), lambda _: block(doc), tag=TAG))
        return 0
    meta = machine(1)
    figures = asyncio.run(measure(args.n, args.rounds, not args.no_postgres, CONCURRENCY))
    meta["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    doc = {"machine": meta, "options": {"n": args.n, "rounds": args.rounds}, "figures": figures}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
