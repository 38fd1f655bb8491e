"""A/B: this tree's gateway against another tree's (a base commit's worktree with its own .venv),
side by side in the same minutes, with the floors, over several runs.

    python -m effectgate_lab.bench.ab --base ../base [--runs 3] [--n 1000] [--json FILE]
    python -m effectgate_lab.bench.ab --base ../base --side traced=.:OTLP  # a traced side too
    python -m effectgate_lab.bench.ab --base ../base --side quiet=.:LOG_LEVEL=WARNING
    python -m effectgate_lab.bench.ab --render docs/bench-run.json  # print a committed run again
    python -m effectgate_lab.bench.ab --render docs/bench-run.json --write docs/benchmarks.md

A side's tree without a .venv (a scratch worktree of one lever) runs on this interpreter with
its `src` first on the path.

Each run starts the Stripe simulator, one gateway per side (each by its own tree's interpreter,
on a fresh SQLite FULL file, at the same `--log-level`: INFO, the shipped default, unless told)
and the echo server; then at every concurrency the direct call, echo, and every side's new
actions and their replays run in interleaved rounds (`load.Interleaved`), so a machine whose
speed drifts moves all of them alike. `ab_report` prints each figure's median and range over the
runs, and the ratios the targets of docs/benchmarks.md judge, per run and against the base.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effectgate_lab.bench import targets
from effectgate_lab.bench.ab_report import FSYNC, doc_block, render, summary
from effectgate_lab.bench.load import Figure, Interleaved
from effectgate_lab.bench.report import machine, write_json
from effectgate_lab.bench.run import Baselines, Served, add_paths, floors, running
from effectgate_lab.chaos.reporting import docs_blocks
from effectgate_lab.labkit.children import Child
from effectgate_lab.labkit.workdir import temporary_workdir

OTLP = "OTLP"  # a side's env marker: export every trace and metric to a local OTLP sink
LOG_LEVEL = "LOG_LEVEL"  # a side's env key: its gateway's --log-level instead of the run's


@dataclass(frozen=True)
class Side:
    """One gateway under test: a name, the tree whose .venv runs it, and extra environment."""

    name: str
    tree: Path
    env: tuple[tuple[str, str], ...] = ()

    @property
    def python(self) -> str:
        """The tree's own .venv; a tree without one (a scratch worktree of a lever) runs on this
        interpreter with its `src` first on the path (`env`)."""
        own = self.tree / ".venv" / "bin" / "python"
        return str(own) if own.exists() else sys.executable

    def path_env(self) -> dict[str, str]:
        own = self.tree / ".venv" / "bin" / "python"
        return {} if own.exists() else {"PYTHONPATH": str(self.tree / "src")}

    @property
    def traced(self) -> bool:
        return any(k == OTLP for k, _ in self.env)


def parse_side(text: str) -> Side:
    """`NAME=TREE[:K=V,K=V|OTLP]`."""
    name, _, rest = text.partition("=")
    tree, _, env_text = rest.partition(":")
    env: list[tuple[str, str]] = []
    for item in filter(None, env_text.split(",")):
        key, _, value = item.partition("=")
        env.append((key, value))
    return Side(name, Path(tree).resolve(), tuple(env))


@dataclass(frozen=True)
class Options:
    sides: Sequence[Side]
    runs: int = 3
    rounds: int = 5
    n: int = 1000
    concurrency: Sequence[int] = (1, 16)
    log_level: str = "INFO"


def side_env(side: Side, endpoint: str | None) -> dict[str, str]:
    env = {k: v for k, v in side.env if k not in (OTLP, LOG_LEVEL)}
    if side.traced and endpoint is not None:
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_METRIC_EXPORT_INTERVAL": "5000",
        }
    return env


def gateway(side: Side, sim_url: str, workdir: Path, log_level: str, endpoint: str | None) -> Child:
    name = f"{side.name}-{uuid.uuid4().hex[:6]}"
    child = targets.gateway(f"sqlite:///{workdir}/{name}.db", sim_url, workdir, name, env=side_env(side, endpoint))
    child.argv[0] = side.python  # the side's own tree and dependencies
    child.argv[child.argv.index("--log-level") + 1] = dict(side.env).get(LOG_LEVEL, log_level)
    child.env.pop("PYTHONPATH", None)
    child.env |= side.path_env()
    return child


@contextlib.contextmanager
def fsync_floor(workdir: Path) -> Iterator[Callable[[int], Awaitable[None]]]:
    """One durable write's storage floor: a 4 KiB page appended and fsync'd, in a thread like the
    store's writer, on the file system the gateways' SQLite files are on. A new action at
    SQLite FULL commits twice (its claim, then its outcome) and cannot answer faster than
    direct + echo + two of these. The file is open for as long as the block runs."""
    fd = os.open(workdir / "fsync-floor.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    page = b"\0" * 4096

    def write() -> None:
        os.write(fd, page)
        os.fsync(fd)

    async def one(_: int) -> None:
        await asyncio.to_thread(write)

    try:
        yield one
    finally:
        os.close(fd)


async def interleave(
    base: Baselines,
    clients: Sequence[targets.GatewayCalls],
    gateways: Sequence[Served],
    c: int,
    n: int,
    rounds: int,
    fsync: Callable[[int], Awaitable[None]],
) -> list[Figure]:
    side = Interleaved(c)
    side.add("direct", "stripe simulator", base.direct, n, server_pid=base.direct_pid)
    side.add("echo", "bare grpc.aio", base.echo, n, server_pid=base.echo_pid)
    if c == 1:
        side.add("fsync", FSYNC, fsync, n)
    for calls, served in zip(clients, gateways, strict=True):
        add_paths(side, calls, served, n, duplicates=False)
    return await side.run(rounds)


async def one_run(opts: Options) -> list[Figure]:
    """Every side and the floors, at every concurrency, in interleaved rounds; fresh processes
    and stores, in a directory removed after the run (kept, and named, when the run fails)."""
    with temporary_workdir("effectgate-ab-", "bench") as workdir:
        return await measured_in(opts, workdir)


async def measured_in(opts: Options, workdir: Path) -> list[Figure]:
    os.environ[targets.KEY_ENV] = targets.API_KEY
    sim = targets.simulator(workdir)
    sim_url = await sim.start()
    sink = targets.otlp_sink(workdir) if any(s.traced for s in opts.sides) else None
    endpoint = await sink.start() if sink is not None else None
    figures: list[Figure] = []
    try:
        children = [gateway(s, sim_url, workdir, opts.log_level, endpoint) for s in opts.sides]
        async with running(children) as ports:
            gateways = [Served(p, s.name, c.pid) for p, s, c in zip(ports, opts.sides, children, strict=True)]
            async with floors(sim_url, sim.pid, ports[0], workdir) as base:
                clients = [targets.GatewayCalls(g.port) for g in gateways]
                try:
                    with fsync_floor(workdir) as fsync:
                        for c in opts.concurrency:
                            warm = max(c, opts.n // 10)
                            await interleave(base, clients, gateways, c, warm, 1, fsync)
                            figures.extend(await interleave(base, clients, gateways, c, opts.n, opts.rounds, fsync))
                finally:
                    for calls in clients:
                        await calls.close()
    finally:
        if sink is not None:
            await sink.stop()
        await sim.stop()
    return figures


async def run(opts: Options) -> list[list[Figure]]:
    return [await one_run(opts) for _ in range(opts.runs)]


def options_from(argv: list[str] | None) -> tuple[Options, Path | None]:
    parser = argparse.ArgumentParser(prog="python -m effectgate_lab.bench.ab", description=__doc__)
    parser.add_argument("--base", type=Path, required=True, help="the base tree (with its own .venv)")
    parser.add_argument("--tree", type=Path, default=Path("."), help="this side's tree (default .)")
    parser.add_argument("--side", action="append", default=[], help="another side: NAME=TREE[:K=V,...|OTLP]")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=1000, help="calls per figure and run")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--log-level", default="INFO", help="the gateways' (default INFO, as shipped)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sides = [Side("base", args.base.resolve()), Side("this", args.tree.resolve())]
    sides += [parse_side(text) for text in args.side]
    opts = Options(
        sides=sides,
        runs=args.runs,
        rounds=args.rounds,
        n=args.n,
        concurrency=tuple(int(c) for c in args.concurrency.split(",")),
        log_level=args.log_level,
    )
    return opts, args.json


def to_json(runs: list[list[Figure]], opts: Options, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "machine": meta,
        "options": {
            "sides": [{"name": s.name, "tree": s.tree.name, "env": dict(s.env)} for s in opts.sides],
            "runs": opts.runs,
            "rounds": opts.rounds,
            "n": opts.n,
            "concurrency": list(opts.concurrency),
            "log_level": opts.log_level,
        },
        "runs": [[f.to_json() for f in figures] for figures in runs],
    }


def main(argv: list[str] | None = None) -> None:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--render"]:  # a committed run printed again: `--render docs/bench-run.json`
        doc = json.loads(Path(argv[1]).read_text())
        doc["summary"] = summary(doc)
        print(render(doc), flush=True)
        if argv[2:3] == ["--write"]:  # and written into a page's `<!-- bench:NAME -->` blocks
            for page in map(Path, argv[3:]):
                page.write_text(docs_blocks.rewrite(page.read_text(), lambda name: doc_block(doc, name), tag="bench"))
        return
    opts, json_path = options_from(argv)
    meta = machine()
    meta["base_commit"] = head_of(opts.sides[0].tree)
    runs = asyncio.run(run(opts))
    doc = to_json(runs, opts, meta)
    doc["summary"] = summary(doc)
    print(render(doc), flush=True)
    if json_path is not None:
        write_json(json_path, doc)


def head_of(tree: Path) -> str:
    import subprocess

    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
