"""One clock for the replicas (docs/protocol.md, "Clocks").

Three `effectgate serve` processes on one PostgreSQL (lease_ttl 6 s, attempt_timeout 2 s,
consistency window 3 s, reconcile every 1 s) in front of a provider WITHOUT idempotency keys whose
writes land 0.4-1.6 s after they are sent and whose reads lag 1 s; effects are counted at the
provider. Replica C runs under libfaketime, its wall clock 15 s ahead or behind. Before the
store clock, C took A's in-flight actions over (its clock said A's lease had run out, and the
consistency window too) and sent them again: 19 duplicates in 20 actions at +15 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.crm_sim import CrmSimulator
from tests import clock_kit as kit
from tests.conftest import _missing
from tests.harness import GatewayProcess
from tests.test_replicas import error_reason, running

SKEW_LINE = "clock skew: this host's clock is"
OVER_LINE = "clock skew over:"


@pytest.fixture(autouse=True)
def _needs_faketime(monkeypatch: pytest.MonkeyPatch) -> None:
    if not kit.faketime_lib():
        _missing("libfaketime is not installed (apt-get install faketime)")
    monkeypatch.setenv(kit.KEY_ENV, kit.KEY)


@pytest.fixture
async def crm() -> AsyncIterator[CrmSimulator]:
    sim = kit.slow_crm()
    await sim.start()
    yield sim
    await sim.stop()


async def offset_metric(port: int) -> float:
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    found = re.search(r"^effectgate_clock_offset_seconds(?:\{[^}]*\})? (\S+)$", text, re.M)
    assert found, text
    return float(found.group(1))


async def health(target: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int((await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)).status)


async def run_workload(agent: kit.Agent, crm: CrmSimulator, tag: str, pairs: int = 4, lone: int = 4) -> float:
    """`pairs` actions called at A and, while A's write is on the wire, again at C; `lone`
    actions called at C only (each failing over to another replica when refused). Returns the
    time until every action settled; asserts 0 duplicates and 0 lost at the provider."""
    watch = kit.Stopwatch()
    runs = [f"{tag}-p{i}" for i in range(pairs)] + [f"{tag}-c{i}" for i in range(lone)]

    async def pair(run: str) -> list[pb.Action]:
        first = asyncio.ensure_future(agent.execute(run, ["A", "B"], call="at-a"))
        await asyncio.sleep(0.3)  # A's write is at the provider now (it takes 0.4 s at least)
        second = await agent.execute(run, ["C", "B"], call="at-c")
        return [await first, second]

    alone = asyncio.gather(*(agent.execute(r, ["C", "A"]) for r in runs[pairs:]))  # at once, with the pairs
    paired = await asyncio.gather(*(pair(r) for r in runs[:pairs]))
    alone_answers = await alone
    for action in [a for both in paired for a in both] + list(alone_answers):
        assert action.state in (pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_UNKNOWN, pb.EFFECT_STATE_DISPATCHED)
    final = [await agent.settled(r, "B") for r in runs]
    settle = watch()
    rows = kit.invoices_at_provider(crm)
    duplicates = {i: n for i, n in rows.items() if n > 1}
    lost = [r for r, action in zip(runs, final, strict=True) if rows[f"inv_{r}"] == 0]
    assert not duplicates, f"duplicates at the provider: {duplicates}"
    assert not lost, f"lost: {lost}"
    assert all(action.state == pb.EFFECT_STATE_CONFIRMED for action in final), final
    assert sum(rows[f"inv_{r}"] for r in runs) == len(runs)
    print(f"\n[{tag}] {len(runs)} actions: 0 duplicates, 0 lost, settled in {settle:.1f}s; {dict(agent.refusals)}")
    return settle


@contextlib.asynccontextmanager
async def three_replicas(
    tmp_path: Path, dsn: str, crm: CrmSimulator, c_env: dict[str, str], *, c_bound: str = ""
) -> AsyncIterator[tuple[kit.Agent, GatewayProcess, int]]:
    config = kit.replica_config(tmp_path / "ab.toml", dsn, crm)
    c_config = kit.replica_config(tmp_path / "c.toml", dsn, crm, max_clock_skew=c_bound, metrics=True)
    a, b, c = GatewayProcess(config), GatewayProcess(config), GatewayProcess(c_config, env=c_env)
    async with running(a, b, c):
        metrics_port = await c.metrics_port()
        agent = kit.Agent({"A": a.target, "B": b.target, "C": c.target})
        try:
            yield agent, c, metrics_port
        finally:
            await agent.close()


# -- 1. a skewed replica refuses work; the others serve it exactly once ------------------------


# The interleavings themselves (a replica 15 s ahead or behind, refusing or serving, beside
# others) are the simulator's (tests/sim/test_sim_claims.py, every lease, window and store write
# checked): here, one process per case proves the wiring (libfaketime's clock read through
# PostgreSQL's, the health status, the metric, the log line, the refusal's reason, the fail-over),
# one sign each.


@pytest.mark.parametrize("offset", ["+15s"])
async def test_a_skewed_replica_refuses_work_and_nothing_is_doubled_or_lost(
    tmp_path: Path, pg_dsn: str, crm: CrmSimulator, offset: str
) -> None:
    async with three_replicas(tmp_path, pg_dsn, crm, kit.faketime_env(offset)) as (agent, c, metrics_port):
        assert await health(c.target) == health_pb2.HealthCheckResponse.NOT_SERVING
        metric = await offset_metric(metrics_port)
        await run_workload(agent, crm, f"refused{offset}")
        log = "".join(c.output)
    # The store's clock minus C's: -15 s when C is 15 s ahead.
    assert abs(metric + float(offset.removesuffix("s"))) < 1.0, metric
    assert log.count(SKEW_LINE) == 1, log  # one line, said once
    assert re.search(rf"this host's clock is \{offset[0]}1[45]\.\d+s off the store's \(bound 1s\)", log), log
    # C took nothing: every call it got was refused as CLOCK_SKEW, and each was served elsewhere.
    assert agent.refusals[("C", "CLOCK_SKEW")] == 8, agent.refusals
    assert {name for name, _ in agent.refusals} == {"C"}, agent.refusals


# -- 2. the store clock alone keeps a skewed replica correct (its refusal bound lifted) ---------


@pytest.mark.parametrize("offset", ["-15s"])
async def test_replicas_share_the_store_clock_whatever_their_hosts_say(
    tmp_path: Path, pg_dsn: str, crm: CrmSimulator, offset: str
) -> None:
    """C serves (max_clock_skew = 60 s lifts the refusal): it reads A's lease and A's window on
    the store's clock, so it waits for A instead of taking A's action over; A and B likewise
    leave C's fresh actions alone."""
    env = kit.faketime_env(offset)
    async with three_replicas(tmp_path, pg_dsn, crm, env, c_bound="60s") as (agent, c, metrics_port):
        assert await health(c.target) == health_pb2.HealthCheckResponse.SERVING
        await run_workload(agent, crm, f"served{offset}")
        metric = await offset_metric(metrics_port)
        log = "".join(c.output)
    assert abs(metric + float(offset.removesuffix("s"))) < 1.0, metric
    assert SKEW_LINE not in log
    assert not agent.refusals.get(("C", "CLOCK_SKEW")), agent.refusals


# -- 3. a clock that jumps while running ----------------------------------------------------------


async def test_a_clock_jump_is_detected_within_a_reconcile_interval_and_recovers(
    tmp_path: Path, pg_dsn: str, crm: CrmSimulator
) -> None:
    clock_file = tmp_path / "faketime"
    clock_file.write_text("+0s\n")
    config = kit.replica_config(tmp_path / "c.toml", pg_dsn, crm)
    replica = GatewayProcess(config, env=kit.faketime_env(timestamp_file=clock_file))
    async with running(replica):
        agent = kit.Agent({"C": replica.target})
        try:
            assert await health(replica.target) == health_pb2.HealthCheckResponse.SERVING
            ok = await agent.stub("C").Execute(kit.invoice("jump-0"), timeout=20)
            assert ok.action.state == pb.EFFECT_STATE_CONFIRMED

            async def serving() -> bool:
                return bool(await health(replica.target) == health_pb2.HealthCheckResponse.SERVING)

            clock_file.write_text("+15s\n")  # the host's clock steps 15 s ahead
            # Generous: one reconcile interval is the design, ten is the assertion.
            detected = await kit.until(lambda: SKEW_LINE in "".join(replica.output), 10 * kit.RECONCILE, "detected")
            assert await health(replica.target) == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await agent.stub("C").Execute(kit.invoice("jump-1"), timeout=20)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert error_reason(refused.value) == "CLOCK_SKEW"

            clock_file.write_text("+0s\n")  # and back
            recovered = await kit.until(lambda: OVER_LINE in "".join(replica.output), 10 * kit.RECONCILE, "over")
            await kit.until(serving, 10, "SERVING again")
            again = await agent.stub("C").Execute(kit.invoice("jump-1"), timeout=20)
            assert again.action.state == pb.EFFECT_STATE_CONFIRMED
        finally:
            await agent.close()
    log = "".join(replica.output)
    print(f"\n[jump] detected after {detected:.2f}s, recovery seen after {recovered:.2f}s")
    assert log.count(SKEW_LINE) == 1 and log.count(OVER_LINE) == 1, log
    assert kit.invoices_at_provider(crm) == {"inv_jump-0": 1, "inv_jump-1": 1}


# -- 4. a replica cut off from PostgreSQL at the claim ----------------------------------------------


async def test_a_partition_from_the_store_at_the_claim_doubles_and_loses_nothing(
    tmp_path: Path, pg_dsn: str, crm: CrmSimulator
) -> None:
    """A reaches PostgreSQL through a proxy that stops forwarding (connections stay open, bytes are
    held) for longer than the lease, then heals and delivers what it held. B carries on. The proxy
    freezes the moment A's claim (INSERT) leaves for PostgreSQL (A runs without a statement cache,
    so that every statement carries its text); the claim lands after the heal, its lease long
    expired. A partition mid-call (A's writes at the provider when it loses the store) is the
    simulator's: its stall after a provider call, longer than a lease (tests/sim/replicas.py)."""
    host_dsn = re.sub(r"@([^/:]+):(\d+)/", "@{}/", pg_dsn)
    upstream = int(re.search(r"@[^/:]+:(\d+)/", pg_dsn).group(1))  # type: ignore[union-attr]
    proxy = kit.FreezableProxy(upstream)
    port = await proxy.start()
    a_dsn = (
        host_dsn.format(f"127.0.0.1:{port}")
        + ("&" if "?" in pg_dsn else "?")
        + "command_timeout=3&statement_cache_size=0"
    )
    a = GatewayProcess(kit.replica_config(tmp_path / "a.toml", a_dsn, crm))
    b = GatewayProcess(kit.replica_config(tmp_path / "b.toml", pg_dsn, crm))
    runs = [f"at-claim-{i}" for i in range(4)]
    try:
        async with running(a, b):
            agent = kit.Agent({"A": a.target, "B": b.target})
            try:
                proxy.freeze_on(b"INSERT INTO actions")  # the first claim's INSERT is held, and all after it
                calls = [asyncio.ensure_future(agent.execute(r, ["A", "B"])) for r in runs]
                await kit.until(lambda: proxy.frozen, 10, "frozen at a claim")
                await asyncio.sleep(kit.LEASE_TTL + 2)
                proxy.heal()
                await asyncio.gather(*calls)
                final = [await agent.settled(r, "B") for r in runs]
            finally:
                await agent.close()
    finally:
        await proxy.stop()
    rows = kit.invoices_at_provider(crm)
    assert {r: rows[f"inv_{r}"] for r in runs} == dict.fromkeys(runs, 1), rows
    assert all(action.state == pb.EFFECT_STATE_CONFIRMED for action in final), final


# -- 5. `effectgate check` reports the offset --------------------------------------------------------


async def test_check_reports_the_offset_to_the_store_clock(tmp_path: Path, pg_dsn: str, crm: CrmSimulator) -> None:
    config = kit.replica_config(tmp_path / "c.toml", pg_dsn, crm)
    env = {**os.environ, **kit.faketime_env("+15s")}
    cmd = [sys.executable, "-m", "effectgate.gateway", "check", "--config", str(config)]
    done = await asyncio.to_thread(subprocess.run, cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert re.search(
        r"clock: this host's clock is \+1[45]\.\d+s off the store's .*bound 1s\): OUT OF BOUND", done.stdout
    )
