"""A sink that is down does not slow `Execute`: gateways side by side in the same minutes,
(a) without `[[notify]]` and (b) the same config plus a webhook sink that is down for the whole
measurement, with a backlog of notifications failing and retrying, and (a2) a second gateway like
(a), the control: what two like gateways differ by in the same minutes. Then the sink comes up and
the backlog is delivered (docs/benchmarks.md, docs/notifications.md).

    python -m effectgate_lab.bench.notify_down [--n 1000] [--rounds 5] [--runs 3] [--json FILE]
    python -m effectgate_lab.bench.notify_down --render docs/bench-notify-run.json  # print it again

Each run starts the Stripe simulator, the receiver (down: it reads each request and never answers,
so every attempt waits out the sink's `timeout`, the worst a down sink can do) and the gateways on
fresh SQLite FULL files. Each is seeded with the same `--seed` actions of a tool that requires
approval; on (b) each makes an `approval_waiting` notification, and the run waits until all of
them are in the outbox and the receiver has held two attempts. Then, at each concurrency, new
actions and their replays of every side run in interleaved rounds (`load.Interleaved`, the sides'
order turned from run to run), with each gateway's CPU per call. Then the receiver comes up and
the run waits (bounded) until it has every seeded notification, signature checked, and (b)'s
outbox is empty. `notify_report` prints each figure's median and range over the runs, and the
ratios b/a and a2/a taken within each run.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from standardwebhooks import Webhook

from effectgate.gateway.store import open_store
from effectgate.v1 import gateway_pb2
from effectgate_lab.bench import targets
from effectgate_lab.bench.load import Figure, Interleaved, measure
from effectgate_lab.bench.notify_report import key, render, summary
from effectgate_lab.bench.report import machine, write_json
from effectgate_lab.bench.run import Served, add_paths, running
from effectgate_lab.labkit.children import Child
from effectgate_lab.labkit.workdir import temporary_workdir

APPROVAL_TOOL = "approve_card"  # the seed's tool: every new action waits for approval
SECRET_ENV = "BENCH_NOTIFY_SECRET"
SECRET = "whsec_" + base64.b64encode(b"bench-notify-secret-0123456789").decode()
BASE, DOWN, CONTROL = "a: no notify", "b: notify down", "a2: no notify (control)"
KINDS = ["approval_waiting", "approval_decided", "approval_expired", "unknown_parked"]


@dataclass(frozen=True)
class Options:
    runs: int = 3
    rounds: int = 5
    n: int = 1000  # new actions (and as many replays) per side, concurrency and run
    concurrency: Sequence[int] = (1, 16)
    seed: int = 200  # approval actions on each side before the measurement: (b)'s backlog
    timeout: float = 2.0  # the sink's: how long each attempt hangs
    log_level: str = "INFO"  # the gateways' (the shipped default: (b) logs every failed attempt)
    delivered_within: float = 120.0  # the bound on "delivered after"
    control: bool = True  # a third side, a second gateway like (a): the noise floor of b/a


def sides_of(opts: Options) -> list[str]:
    return [BASE, DOWN, CONTROL] if opts.control else [BASE, DOWN]


class DownReceiver:
    """POST /hook on 127.0.0.1. Down: reads the request and never answers (the sender waits out
    its timeout), counting the attempts held. Up: answers 200 and keeps each distinct, verified
    `webhook-id`. A request held while down is answered 503 when it comes up (its sender is gone)."""

    def __init__(self) -> None:
        self.held = 0
        self.delivered: dict[str, str] = {}  # webhook-id -> type
        self._up = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._arrived = asyncio.Event()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> DownReceiver:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        return self

    def up(self) -> None:
        self._up.set()

    async def stop(self) -> None:
        self._up.set()  # lets held handlers end
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not self._up.is_set():
            self.held += 1
            await self._up.wait()
            return web.Response(status=503, text="was down")
        headers = {k.lower(): v for k, v in request.headers.items()}
        doc = Webhook(SECRET).verify(body, headers)  # raises (500) on a bad signature
        self.delivered[request.headers["webhook-id"]] = str(doc["type"])
        self._arrived.set()
        return web.Response(text="ok")

    async def until(self, count: int, deadline: float) -> None:
        while len(self.delivered) < count and time.monotonic() < deadline:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), max(0.0, min(0.5, deadline - time.monotonic())))


def sink(url: str, timeout: float) -> dict[str, Any]:
    """(b)'s one sink: the kinds the seed makes; retried soon and often, and never given up on
    within a run, so the backlog keeps the deliverer busy for the whole measurement."""
    return {
        "name": "down-hook",
        "kind": "webhook",
        "url": url,
        "secret_env": SECRET_ENV,
        "console_url": "https://console.bench.invalid",
        "events": KINDS,
        "timeout": f"{timeout}s",
        "backoff": "0.2s",
        "backoff_max": "1s",
        "max_attempts": 1000,
    }


def gateway(
    name: str, store_url: str, sim_url: str, workdir: Path, notify: list[dict[str, Any]], log_level: str
) -> Child:
    tools = {APPROVAL_TOOL: {"adapter": "stripe", "approval": "required"}}
    tables: dict[str, Any] = {"gateway": {"notify_interval": "0.2s"}}  # the same [gateway] on both sides
    if notify:
        tables["notify"] = notify
    child = targets.gateway(store_url, sim_url, workdir, name, env={SECRET_ENV: SECRET}, tools=tools, tables=tables)
    child.argv[child.argv.index("--log-level") + 1] = log_level
    return child


async def seed(port: str, n: int) -> None:
    """`n` new actions of the approval tool at c=16: each waits for approval."""
    calls = targets.GatewayCalls(port)
    tag = uuid.uuid4().hex[:8]
    requests = [targets.execute_request(f"seed-{tag}-{i // 100}", f"step-{i % 100}") for i in range(n)]
    for request in requests:
        request.tool = APPROVAL_TOOL

    async def one(i: int) -> None:
        answer = await calls.execute(requests[i])
        if answer.action.state != gateway_pb2.EFFECT_STATE_AWAITING_APPROVAL:
            raise RuntimeError(f"a seeded action does not wait for approval: {answer.action}")

    try:
        await measure("seed", "", n, 16, one)
    finally:
        await calls.close()


async def outbox(store_url: str) -> tuple[int, int, int]:
    """(b)'s outbox read through the store API: (pending rows, failed rows, the most attempts)."""
    store = open_store(store_url)
    await store.open()
    try:
        counts = await store.notify_counts()
        rows = await store.notify_rows(False, 10_000)
    finally:
        await store.close()
    pending = sum(n for _, failed, n in counts if not failed)
    failed = sum(n for _, failed, n in counts if failed)
    return pending, failed, max((r.attempts for r in rows), default=0)


async def backlog_failing(store_url: str, receiver: DownReceiver, n: int, within: float) -> tuple[int, int]:
    """Waits until (b)'s outbox holds all `n` and the receiver has held two attempts (failing and
    retrying); returns (pending, most attempts)."""
    deadline = time.monotonic() + within
    while True:
        pending, failed, attempts = await outbox(store_url)
        if pending >= n and receiver.held >= 2 and attempts >= 1:
            return pending, attempts
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the backlog did not form: {pending} pending, {failed} failed, {receiver.held} attempts held"
            )
        await asyncio.sleep(0.2)


async def delivered_after(store_url: str, receiver: DownReceiver, n: int, within: float) -> dict[str, Any]:
    """Brings the receiver up; waits (bounded) until it has `n` notifications and the outbox is
    empty."""
    receiver.up()
    started = time.monotonic()
    deadline = started + within
    await receiver.until(n, deadline)
    pending, failed, _ = await outbox(store_url)
    while pending and time.monotonic() < deadline:  # the last removals commit after the answers
        await asyncio.sleep(0.1)
        pending, failed, _ = await outbox(store_url)
    return {
        "delivered": len(receiver.delivered),
        "approval_waiting": sum(1 for t in receiver.delivered.values() if t == "approval_waiting"),
        "seconds": time.monotonic() - started,
        "pending_after": pending,
        "failed_after": failed,
    }


async def one_run(opts: Options, index: int) -> dict[str, Any]:
    """One run in a directory removed after it (kept, and named, when the run fails)."""
    with temporary_workdir("effectgate-notify-down-", "bench") as workdir:
        return await measured_in(opts, index, workdir)


async def measured_in(opts: Options, index: int, workdir: Path) -> dict[str, Any]:
    os.environ[targets.KEY_ENV] = targets.API_KEY
    sim = targets.simulator(workdir)
    sim_url = await sim.start()
    receiver = await DownReceiver().start()
    sides = sides_of(opts)
    urls = {side: f"sqlite:///{workdir}/{key(side)}.db" for side in sides}
    down_url = urls[DOWN]
    figures: list[Figure] = []
    facts: dict[str, Any] = {}
    try:
        sinks = {side: [sink(receiver.url, opts.timeout)] if side == DOWN else [] for side in sides}
        children = [gateway(key(s), urls[s], sim_url, workdir, sinks[s], opts.log_level) for s in sides]
        async with running(children) as ports:
            gateways = [Served(p, s, c.pid) for p, s, c in zip(ports, sides, children, strict=True)]
            for g in gateways:
                await seed(g.port, opts.seed)
            pending, attempts = await backlog_failing(down_url, receiver, opts.seed, 3 * opts.timeout + 60)
            facts |= {"seeded": opts.seed, "pending_before": pending, "most_attempts_before": attempts}
            held = receiver.held
            # The order of the sides within a round turns from run to run: no side is always first.
            turn = index % len(gateways)
            order = gateways[turn:] + gateways[:turn]
            clients = [targets.GatewayCalls(g.port) for g in order]
            try:
                for c in opts.concurrency:
                    await interleave(clients, order, c, max(c, opts.n // 10), 1)  # warm-up
                    figures.extend(await interleave(clients, order, c, opts.n, opts.rounds))
            finally:
                for calls in clients:
                    await calls.close()
            facts["attempts_held_during"] = receiver.held - held
            pending, _, attempts = await outbox(down_url)
            facts |= {"pending_after_measuring": pending, "most_attempts_after_measuring": attempts}
            facts["after"] = await delivered_after(down_url, receiver, opts.seed, opts.delivered_within)
    finally:
        await receiver.stop()
        await sim.stop()
    return {"figures": [f.to_json() for f in figures], "notify": facts, "order": [g.setup for g in order]}


async def interleave(
    clients: Sequence[targets.GatewayCalls], gateways: Sequence[Served], c: int, n: int, rounds: int
) -> list[Figure]:
    side = Interleaved(c)
    for calls, served in zip(clients, gateways, strict=True):
        add_paths(side, calls, served, n, duplicates=False)
    return await side.run(rounds)


async def run(opts: Options) -> list[dict[str, Any]]:
    return [await one_run(opts, i) for i in range(opts.runs)]


def options_from(argv: list[str] | None) -> tuple[Options, Path | None]:
    parser = argparse.ArgumentParser(prog="python -m effectgate_lab.bench.notify_down", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=1000, help="new actions per side, concurrency and run")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--seed", type=int, default=200, help="approval actions per side: (b)'s backlog")
    parser.add_argument("--timeout", type=float, default=2.0, help="the sink's timeout: each attempt hangs this long")
    parser.add_argument("--log-level", default="INFO", help="the gateways' (default INFO, as shipped)")
    parser.add_argument("--no-control", action="store_true", help="skip the A/A control side (a second (a))")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    opts = Options(
        runs=args.runs,
        rounds=args.rounds,
        n=args.n,
        concurrency=tuple(int(c) for c in args.concurrency.split(",")),
        seed=args.seed,
        timeout=args.timeout,
        log_level=args.log_level,
        control=not args.no_control,
    )
    return opts, args.json


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--render"]:  # a committed run printed again
        print(render(json.loads(Path(argv[1]).read_text())), flush=True)
        return
    opts, json_path = options_from(argv)
    meta = machine()
    runs = asyncio.run(run(opts))
    meta["load_average_end"] = os.getloadavg()
    doc: dict[str, Any] = {
        "machine": meta,
        "options": {
            "runs": opts.runs,
            "rounds": opts.rounds,
            "n": opts.n,
            "concurrency": list(opts.concurrency),
            "seed": opts.seed,
            "timeout": opts.timeout,
            "log_level": opts.log_level,
            "sides": sides_of(opts),
        },
        "runs": runs,
    }
    doc["summary"] = summary(doc)
    print(render(doc), flush=True)
    if json_path is not None:
        write_json(json_path, doc)
    if not doc["summary"]["delivered_after"]:
        raise SystemExit("the backlog was not delivered after the sink came up")


if __name__ == "__main__":
    main()
