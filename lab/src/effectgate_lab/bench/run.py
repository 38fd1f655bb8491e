# ~400 lines on purpose: one run's measurements in the order they run; load, targets and report are rooms of their own.
"""One benchmark run: baselines and gateway paths measured side by side in the same minutes.

Order: the Stripe simulator starts; a gateway on SQLite FULL answers one real Execute whose
response the echo server then replays (an Execute-sized message); at every concurrency the
direct call, echo, and the gateway's new actions, replays and duplicates run in interleaved
rounds (`load.Interleaved`), so the ratios the targets judge compare figures of the same
seconds; then RSS over a long run of requests; then the other store setups; then the 1 M-action
store and the tracing comparison, each interleaved with its reference gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effectgate_lab.bench import targets
from effectgate_lab.bench.load import Figure, Interleaved, One, measure
from effectgate_lab.bench.preload import preload
from effectgate_lab.labkit.children import Child, rss_bytes
from effectgate_lab.labkit.postgres import find_bindir, start_server
from effectgate_lab.labkit.workdir import temporary_workdir


@dataclass(frozen=True)
class Options:
    n: int = 1000  # calls per measurement (twice that at c >= 64)
    concurrency: Sequence[int] = (1, 16, 64)
    small: int = 1000  # stored actions of the ordinary setups
    scale: int = 1_000_000  # stored actions of the scale setup (0 = skip)
    rss_requests: int = 200_000  # requests of the RSS run (0 = skip)
    postgres: bool = True
    tracing: bool = True  # the same gateway with and without OTLP export, side by side
    limits: bool = True  # the same gateway with and without limits on the tool, side by side
    workers: int = 2  # `serve --workers N` against one process, side by side (0 = skip)
    clock: bool = True  # on PostgreSQL: the store's clock against the host's, side by side
    gateway_env: dict[str, str] = field(default_factory=dict)  # e.g. OTEL_* for a traced run


@dataclass
class Results:
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rss: dict[str, Any] = field(default_factory=dict)
    preload_s: dict[str, float] = field(default_factory=dict)

    def find(self, path: str, concurrency: int, setup_prefix: str = "") -> Figure | None:
        for fig in self.figures:
            if fig.path == path and fig.concurrency == concurrency and fig.setup.startswith(setup_prefix):
                return fig
        return None


# Every comparison runs in this many interleaved rounds (load.Interleaved).
ROUNDS = 5


def calls_for(opts: Options, concurrency: int) -> int:
    return opts.n * 2 if concurrency >= 64 else opts.n


@dataclass(frozen=True)
class Baselines:
    """The floors, measured in the same rounds as the gateway (see `load.Interleaved`), and the
    processes that serve them (the Stripe simulator, the echo server)."""

    direct: One
    echo: One
    direct_pid: int
    echo_pid: int


@dataclass(frozen=True)
class Served:
    """A gateway under test: its port, the setup it is reported as, and its process."""

    port: str
    setup: str
    pid: int


async def measure_gateways(
    results: Results,
    opts: Options,
    gateways: Sequence[Served],
    levels: Sequence[int],
    *,
    duplicates: bool = True,
    baselines: Baselines | None = None,
) -> None:
    """New actions, their replays (and duplicates) on each (port, setup), interleaved with each
    other and with the baselines in `ROUNDS` rounds at every concurrency."""
    clients = [targets.GatewayCalls(gateway.port) for gateway in gateways]
    try:
        for c in levels:
            n = calls_for(opts, c)
            side = Interleaved(c)
            if baselines is not None:
                side.add("direct", "stripe simulator", baselines.direct, n, server_pid=baselines.direct_pid)
                side.add("echo", "bare grpc.aio", baselines.echo, n, server_pid=baselines.echo_pid)
            for calls, gateway in zip(clients, gateways, strict=True):
                add_paths(side, calls, gateway, n, duplicates)
            results.figures.extend(await side.run(ROUNDS))
    finally:
        for calls in clients:
            await calls.close()


def add_paths(side: Interleaved, calls: targets.GatewayCalls, gateway: Served, n: int, duplicates: bool) -> None:
    setup, pid = gateway.setup, gateway.pid
    tag = uuid.uuid4().hex[:8]
    requests = [targets.execute_request(f"bench-{tag}-{i // 100}", f"step-{i % 100}") for i in range(n)]

    async def one(i: int) -> None:
        await calls.execute(requests[i])

    side.add("new", setup, one, n, server_pid=pid)
    side.add("replay", setup, one, n, server_pid=pid)  # the actions `new` just created, round by round
    if duplicates:
        pairs = [targets.execute_request(f"bench-{tag}-dup-{i // 100}", f"step-{i % 100}") for i in range(n // 2)]

        async def pair(i: int) -> None:
            await asyncio.gather(calls.execute(pairs[i]), calls.execute(pairs[i]))

        # c calls in flight = c/2 pairs, each a holder and a duplicate that waits on it.
        side.add(
            "duplicate",
            setup,
            pair,
            n // 2,
            calls_per_op=2,
            concurrency=max(1, side.concurrency // 2),
            server_pid=pid,
        )


async def with_gateway(opts: Options, store_url: str, sim_url: str, workdir: Path, name: str) -> tuple[Child, str]:
    child = targets.gateway(store_url, sim_url, workdir, name, env=opts.gateway_env)
    port = await child.start()
    return child, port


def file_name(setup: str) -> str:
    return setup.replace(" ", "-").replace(",", "")


async def measure_store(
    results: Results, opts: Options, store_url: str, sim_url: str, workdir: Path, setup: str, levels: Sequence[int]
) -> None:
    child, port = await with_gateway(opts, store_url, sim_url, workdir, file_name(setup))
    try:
        await measure_gateways(results, opts, [Served(port, setup, child.pid)], levels)
    finally:
        await child.stop()


async def measure_scale(results: Results, opts: Options, sim_url: str, workdir: Path) -> None:
    """The same gateway on a store of `small` and of `scale` actions, measured alternately at each
    concurrency so that both see the same machine minutes."""
    setups = []
    for n in (opts.small, opts.scale):
        url = f"sqlite:///{workdir}/scale-{n}.db"
        results.preload_s[f"sqlite FULL {n}"] = await preload(url, n)
        setups.append((f"scale: sqlite FULL, {scale_label(n)} stored", url))
    children = [targets.gateway(url, sim_url, workdir, file_name(setup), env=opts.gateway_env) for setup, url in setups]
    async with running(children) as ports:
        gateways = served(ports, [setup for setup, _ in setups], children)
        await measure_gateways(results, opts, gateways, (1, 16), duplicates=False)


@contextlib.asynccontextmanager
async def running(children: Sequence[Child]) -> AsyncIterator[list[str]]:
    """Starts `children` in order and yields their ports; stops every one that started."""
    started: list[Child] = []
    try:
        ports = []
        for child in children:
            ports.append(await child.start())
            started.append(child)
        yield ports
    finally:
        for child in started:
            await child.stop()


async def measure_rss(results: Results, opts: Options, port: str, pid: int) -> None:
    """`rss_requests` requests at c=16, one in ten a new action and the rest replays of those."""
    calls = targets.GatewayCalls(port)
    tag = uuid.uuid4().hex[:8]
    samples: list[tuple[int, int]] = []
    warmup = opts.rss_requests // 10

    async def one(i: int) -> None:
        k = i // 10  # the action of this request: new on the first of ten, replayed after
        await calls.execute(targets.execute_request(f"rss-{tag}-{k // 100}", f"step-{k % 100}"))
        if i % (opts.rss_requests // 20 or 1) == 0:
            samples.append((i, rss_bytes(pid)))

    try:
        fig = await measure("rss mix", "sqlite FULL", opts.rss_requests, 16, one)
    finally:
        await calls.close()
    samples.append((opts.rss_requests, rss_bytes(pid)))
    base = next(rss for i, rss in samples if i >= warmup)
    results.rss = {
        "requests": opts.rss_requests,
        "warmup_requests": warmup,
        "rss_after_warmup_mb": base / 2**20,
        "rss_end_mb": samples[-1][1] / 2**20,
        "growth": samples[-1][1] / base - 1,
        # Bounded caches (settled records, their wire form) fill during the first part of the run;
        # a leak keeps growing through the second half too.
        "growth_second_half": samples[-1][1] / next(rss for i, rss in samples if i >= opts.rss_requests // 2) - 1,
        "samples": [{"requests": i, "rss_mb": rss / 2**20} for i, rss in samples],
        "per_s": fig.per_s,
    }


def served(ports: Sequence[str], setups: Sequence[str], children: Sequence[Child]) -> list[Served]:
    return [Served(port, setup, child.pid) for port, setup, child in zip(ports, setups, children, strict=True)]


async def run(opts: Options) -> Results:
    """Every measurement in a directory removed after it (kept, and named, when the run fails)."""
    with temporary_workdir("effectgate-bench-", "bench") as workdir:
        return await measured_in(opts, workdir)


async def measured_in(opts: Options, workdir: Path) -> Results:
    results = Results()
    os.environ[targets.KEY_ENV] = targets.API_KEY
    sim = targets.simulator(workdir)
    sim_url = await sim.start()
    pg = None
    try:
        full_url = f"sqlite:///{workdir}/full.db"
        results.preload_s["sqlite FULL"] = await preload(full_url, opts.small)
        gateway, port = await with_gateway(opts, full_url, sim_url, workdir, "full")
        try:
            setup = f"sqlite FULL, {scale_label(opts.small)} stored"
            async with floors(sim_url, sim.pid, port, workdir) as baselines:
                await measure_gateways(
                    results, opts, [Served(port, setup, gateway.pid)], opts.concurrency, baselines=baselines
                )
            if opts.rss_requests:
                await measure_rss(results, opts, port, gateway.pid)
        finally:
            await gateway.stop()

        normal_url = f"sqlite:///{workdir}/normal.db?synchronous=NORMAL"
        await preload(normal_url, opts.small)
        setup = f"sqlite NORMAL, {scale_label(opts.small)} stored"
        await measure_store(results, opts, normal_url, sim_url, workdir, setup, opts.concurrency)

        bindir = find_bindir() if opts.postgres else None
        if bindir is None:
            results.notes.append("PostgreSQL skipped (no server binaries or --no-postgres)")
        else:
            pg = await asyncio.to_thread(start_server, bindir, fsync=True)
            await preload(pg.dsn, opts.small)
            setup = f"postgres, {scale_label(opts.small)} stored"
            await measure_store(results, opts, pg.dsn, sim_url, workdir, setup, opts.concurrency)
            if opts.clock:
                await measure_clock(results, opts, pg.dsn, sim_url, workdir)

        if opts.scale:
            await measure_scale(results, opts, sim_url, workdir)
        if opts.tracing:
            await measure_tracing(results, opts, sim_url, workdir)
        if opts.limits:
            await measure_limits(results, opts, sim_url, workdir, pg.dsn if pg is not None else None)
        if opts.workers:
            await measure_workers(results, opts, sim_url, workdir)
    finally:
        if pg is not None:
            await asyncio.to_thread(pg.destroy)
        await sim.stop()
    return results


async def measure_tracing(results: Results, opts: Options, sim_url: str, workdir: Path) -> None:
    """SQLite FULL without telemetry and with every trace and metric exported by OTLP/HTTP to a
    local receiver (in its own process), measured alternately at each concurrency."""
    sink = targets.otlp_sink(workdir)
    endpoint = await sink.start()
    traced_env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_METRIC_EXPORT_INTERVAL": "5000",
    }
    try:
        children = []
        for name, env in (("tracing off", {}), ("tracing on", traced_env)):
            url = f"sqlite:///{workdir}/{name.replace(' ', '-')}.db"
            await preload(url, opts.small)
            children.append(
                targets.gateway(url, sim_url, workdir, name.replace(" ", "-"), env={**opts.gateway_env, **env})
            )
        async with running(children) as ports:
            setups = ("tracing off: sqlite FULL", "tracing on: sqlite FULL")
            await measure_gateways(results, opts, served(ports, setups, children), (1, 16), duplicates=False)
        # Leaving the block stopped the gateways gracefully, which flushed the exporters' last batch.
        results.notes.append(f"OTLP receiver got {await targets.sink_stats(endpoint)}")
    finally:
        await sink.stop()


async def measure_clock(results: Results, opts: Options, dsn: str, sim_url: str, workdir: Path) -> None:
    """On one PostgreSQL: the gateway as shipped (every time it compares read from the database's
    clock, re-anchored by a periodic probe) against the same gateway reading this host's clock
    (`bench/host_clock.py`), interleaved at c=1 and 16: the database clock's cost on an action."""
    children = [
        targets.gateway(dsn, sim_url, workdir, "clock-store", env=opts.gateway_env),
        targets.gateway(dsn, sim_url, workdir, "clock-host", env=opts.gateway_env, module=HOST_CLOCK),
    ]
    async with running(children) as ports:
        setups = ("store clock: postgres", "host clock: postgres")
        await measure_gateways(results, opts, served(ports, setups, children), (1, 16), duplicates=False)


HOST_CLOCK = "effectgate_lab.bench.host_clock"


async def measure_limits(results: Results, opts: Options, sim_url: str, workdir: Path, pg_dsn: str | None) -> None:
    """The same tool without limits and with limits every new action is counted against
    (`targets.BENCH_LIMITS`: the reservation is taken in the claim's transaction), side by side
    on SQLite FULL and, when there is one, on PostgreSQL (a database of each its own)."""
    stores = ["sqlite FULL"] + (["postgres"] if pg_dsn is not None else [])
    for store in stores:
        children, setups = [], []
        for name, limits in (("limits off", None), ("limits on", targets.BENCH_LIMITS)):
            slug = f"{name}-{store}".replace(" ", "-")
            database = slug.replace("-", "_").lower()
            url = f"sqlite:///{workdir}/{database}.db"
            if pg_dsn is not None and store == "postgres":
                await _create_database(pg_dsn, database)
                url = _database(pg_dsn, database)
            await preload(url, opts.small)
            children.append(targets.gateway(url, sim_url, workdir, slug, env=opts.gateway_env, limits=limits))
            setups.append(f"{name}: {store}")
        async with running(children) as ports:
            await measure_gateways(results, opts, served(ports, setups, children), (1, 16), duplicates=False)


def _database(dsn: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))


async def _create_database(dsn: str, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def measure_workers(results: Results, opts: Options, sim_url: str, workdir: Path) -> None:
    """One `effectgate serve` process against `serve --workers N` (N processes sharing one port
    and one SQLite FULL file), interleaved at c=16 and 64."""
    children, setups = [], []
    for workers in (0, opts.workers):
        name = f"workers-{workers}"
        url = f"sqlite:///{workdir}/{name}.db"
        await preload(url, opts.small)
        children.append(targets.gateway(url, sim_url, workdir, name, env=opts.gateway_env, workers=workers))
        setups.append(f"{max(workers, 1)} process{'es' if workers > 1 else ''}: sqlite FULL")
    async with running(children) as ports:
        levels = [c for c in opts.concurrency if c >= 16] or [16]
        await measure_gateways(results, opts, served(ports, setups, children), levels, duplicates=False)


def scale_label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


@contextlib.asynccontextmanager
async def floors(sim_url: str, sim_pid: int, gateway_port: str, workdir: Path) -> AsyncIterator[Baselines]:
    """The direct call, and the echo server answering the gateway's own answer to one real
    Execute (an Execute-sized message), for as long as the block runs."""
    calls = targets.GatewayCalls(gateway_port)
    try:
        response = await calls.execute(targets.execute_request(f"echo-{uuid.uuid4().hex[:8]}", "sample"))
    finally:
        await calls.close()
    response_file = workdir / "execute-response.bin"
    response_file.write_bytes(response.SerializeToString())
    server = targets.echo(response_file, workdir)
    port = await server.start()
    echo = targets.GatewayCalls(port)
    direct = targets.DirectCalls(sim_url)
    request = targets.execute_request("echo", "step")

    async def echo_one(_: int) -> None:
        await echo.execute(request)

    try:
        yield Baselines(direct=direct.charge, echo=echo_one, direct_pid=sim_pid, echo_pid=server.pid)
    finally:
        await direct.close()
        await echo.close()
        await server.stop()
