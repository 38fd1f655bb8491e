"""Several `effectgate serve` processes on one PostgreSQL database (issue 5).

Every gateway here is a real child process with `store.url` = a fresh PostgreSQL database, a short
lease (`gateway.lease_ttl`) and a provider-call timeout below it; the provider is the Stripe
simulator on loopback. The simulator also counts the create requests that reached it per action
(`sim.creates`), so a test can tell "the gateway sent once" from "the provider deduplicated".
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp import web
from google.protobuf import any_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from effectgate.adapters.stripe.adapter import ACTION_METADATA_KEY
from effectgate.gateway.model.keys import action_id
from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests import pg
from tests.harness import API_KEY, GatewayProcess, config_doc, stripe_tools

CHARGE = tools_pb2.ChargeCard(customer="cus_5", amount=2500, currency="eur", payment_method="pm_card_visa")
STEP, TOOL, SCOPE = "pay", "charge_card", "invoice:5"
LEASE_TTL = 1.5
SETTLED = (pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED)


class CountingStripe(StripeSimulator):
    """The Stripe simulator, also counting every create request that reached it, by action."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.creates: Counter[str] = Counter()
        # The idempotency keys the creates carried, by action.
        self.sent_keys: dict[str, set[str]] = {}
        # When each create request arrived (time.monotonic(), this process's clock), by action.
        self.arrivals: dict[str, list[float]] = {}
        # While set and not yet released, a create that arrives waits here before it is applied
        # (the server goes on after its caller has gone: it is applied once released).
        self.hold: asyncio.Event | None = None
        self.held = asyncio.Event()  # set when a create waits at `hold`

    async def _create(self, request: web.Request) -> web.StreamResponse:
        key = request.headers.get("Idempotency-Key", "")  # effectgate-<action id>-g<generation>
        action = key.removeprefix("effectgate-").rpartition("-g")[0]
        self.creates[action] += 1
        self.sent_keys.setdefault(action, set()).add(key)
        self.arrivals.setdefault(action, []).append(time.monotonic())
        if self.hold is not None:
            self.held.set()
            await self.hold.wait()
        return await super()._create(request)


@pytest.fixture
async def sim() -> AsyncIterator[CountingStripe]:
    simulator = CountingStripe(api_key=API_KEY, search_lag=0.3)
    await simulator.start()
    yield simulator
    await simulator.stop()


def replica_config(
    tmp_path: Path, dsn: str, sim: StripeSimulator, *, lease_ttl: float = LEASE_TTL, attempt_timeout: float = 1.2
) -> Path:
    doc = config_doc(
        dsn,
        gateway={"lease_ttl": f"{lease_ttl}s", "reconcile_interval": "0.2s", "recheck_min": "0.2s"},
        **stripe_tools(sim.base_url, attempt_timeout=f"{attempt_timeout}s"),
    )
    return write_config(doc, tmp_path / "effectgate.toml")


@contextlib.asynccontextmanager
async def running(*replicas: GatewayProcess) -> AsyncIterator[None]:
    """Waits until every replica serves; SIGKILLs whatever is still alive at the end (a stopped
    one is continued first so the kill is not queued behind SIGSTOP)."""
    try:
        await asyncio.gather(*(r.ready() for r in replicas))
        yield
    finally:
        for replica in replicas:
            if replica.proc.poll() is None:
                replica.proc.send_signal(signal.SIGCONT)
            replica.kill()


def charge(run: str, call: str = "") -> pb.ExecuteRequest:
    packed = any_pb2.Any()
    packed.Pack(CHARGE)
    return pb.ExecuteRequest(
        context=pb.RunContext(run_id=run, step_id=STEP), tool=TOOL, scope=SCOPE, payload=packed, tool_call_id=call
    )


def action_of(run: str) -> str:
    return action_id("dev", run, STEP, TOOL, SCOPE)


def effects_by_action(sim: StripeSimulator) -> Counter[str]:
    return Counter(str(e["metadata"][ACTION_METADATA_KEY]) for e in sim.ledger if e["kind"] == "payment_intent")


def ledger_id(sim: StripeSimulator, action: str) -> str:
    (entry,) = [e for e in sim.ledger if e["metadata"].get(ACTION_METADATA_KEY) == action]
    return str(entry["id"])


def stub_for(channel: grpc.aio.Channel) -> gateway_pb2_grpc.EffectGatewayAsyncStub:
    return gateway_pb2_grpc.EffectGatewayStub(channel)


async def wait_for(
    stub: gateway_pb2_grpc.EffectGatewayAsyncStub, action: str, states: Iterable[int], timeout: float
) -> pb.Action:
    """Polls GetAction until the action is in one of `states`; fails after `timeout` seconds."""
    wanted = set(states)
    got = pb.Action()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            while True:
                try:
                    got = await stub.GetAction(pb.GetActionRequest(action_id=action), timeout=5)
                    if got.state in wanted:
                        return got
                except grpc.aio.AioRpcError as exc:
                    if exc.code() != grpc.StatusCode.NOT_FOUND:
                        raise
                await asyncio.sleep(0.05)
    raise AssertionError(f"{action} not in {sorted(wanted)} after {timeout}s: {got}")


def process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat (T = stopped by a signal)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


async def wait_stopped(replica: GatewayProcess, timeout: float = 10.0) -> None:
    """Waits until the process has SIGSTOPped itself at its pause point."""
    async with asyncio.timeout(timeout):
        while True:
            if process_state(replica.proc.pid) == "T":
                return
            assert replica.proc.poll() is None, "the replica exited instead of pausing"
            await asyncio.sleep(0.02)


def error_reason(error: grpc.aio.AioRpcError) -> str:
    """The gateway's ErrorInfo reason ("" for an error the gateway did not write, e.g. transport)."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return str(info.reason)
    return ""


# -- 1. duplicates spread over three replicas ---------------------------------------------------


async def test_fifty_duplicates_over_three_replicas_make_one_effect(
    tmp_path: Path, pg_dsn: str, sim: CountingStripe
) -> None:
    sim.latency = 0.3  # the first dispatch is still at the provider while the duplicates arrive
    # The claim is one send. With the short lease and attempt timeout the other tests need, a
    # loaded machine could make the first send time out and be sent again with its key, deduped
    # by the provider (one effect, correctly, but two sends): here neither can run out.
    config = replica_config(tmp_path, pg_dsn, sim, lease_ttl=60.0, attempt_timeout=15.0)
    replicas = [GatewayProcess(config) for _ in range(3)]
    async with running(*replicas):
        channels = [grpc.aio.insecure_channel(r.target) for r in replicas]
        try:
            stubs = [stub_for(c) for c in channels]
            answers = await asyncio.gather(
                *(stubs[i % 3].Execute(charge("run-dup", call=f"call-{i}"), timeout=20) for i in range(50))
            )
            stored = await stubs[1].GetAction(pb.GetActionRequest(action_id=action_of("run-dup")), timeout=5)
        finally:
            for channel in channels:
                await channel.close(grace=None)
    action = action_of("run-dup")
    assert effects_by_action(sim) == {action: 1}
    assert sim.creates == {action: 1}  # single flight across processes: one send, not provider dedup
    external_id = ledger_id(sim, action)
    assert {(a.action.action_id, a.action.state, a.action.receipt.external_id) for a in answers} == {
        (action, pb.EFFECT_STATE_CONFIRMED, external_id)
    }
    assert [a.replayed for a in answers].count(False) == 1  # one driver; 49 answered from its outcome
    assert stored.state == pb.EFFECT_STATE_CONFIRMED and stored.attempts == 1
    assert stored.receipt.external_id == external_id


# -- 2. kill -9 of a replica: another replica's reconciler settles its actions ------------------


async def test_killed_replicas_actions_settle_on_another_replica(
    tmp_path: Path, pg_dsn: str, sim: CountingStripe
) -> None:
    """Replica `doomed` SIGKILLs itself after the provider committed its first answer, while its
    other actions are still at the slow provider; replica `early` SIGKILLs itself after recording
    its first DISPATCHED (nothing sent), possibly leaving siblings PLANNED. Nobody calls again: the
    two survivors' reconcilers find the expired leases and settle every stored action."""
    sim.latency = 1.0
    config = replica_config(tmp_path, pg_dsn, sim)
    doomed = GatewayProcess(config, crash_at="after_provider_commit")
    early = GatewayProcess(config, crash_at="after_dispatched")
    survivors = [GatewayProcess(config), GatewayProcess(config)]
    doomed_runs = [f"run-k{i}" for i in range(5)]
    early_runs = [f"run-e{i}" for i in range(3)]
    async with running(doomed, early, *survivors):
        doomed_ch = grpc.aio.insecure_channel(doomed.target)
        early_ch = grpc.aio.insecure_channel(early.target)
        watch_ch = grpc.aio.insecure_channel(survivors[0].target)
        try:
            calls = [asyncio.ensure_future(stub_for(doomed_ch).Execute(charge(r), timeout=20)) for r in doomed_runs[:3]]
            calls += [asyncio.ensure_future(stub_for(early_ch).Execute(charge(r), timeout=20)) for r in early_runs]
            await asyncio.sleep(0.5)  # two more reach the provider half-way through the first ones
            calls += [
                asyncio.ensure_future(stub_for(doomed_ch).Execute(charge(r), timeout=20)) for r in doomed_runs[3:]
            ]
            results = await asyncio.gather(*calls, return_exceptions=True)
            for result in results:  # every caller saw its gateway die, none got an answer
                assert isinstance(result, grpc.aio.AioRpcError) and result.code() == grpc.StatusCode.UNAVAILABLE, result
            assert await doomed.wait_exit() == -signal.SIGKILL
            assert await early.wait_exit() == -signal.SIGKILL
            sim.latency = 0.1

            watch = stub_for(watch_ch)
            for run in doomed_runs:  # all five were DISPATCHED and sent before the kill
                settled = await wait_for(watch, action_of(run), SETTLED, timeout=15)
                assert settled.state == pb.EFFECT_STATE_CONFIRMED, settled
                assert settled.receipt.external_id == ledger_id(sim, action_of(run))
            stored_early = 0
            for run in early_runs:
                try:
                    await watch.GetAction(pb.GetActionRequest(action_id=action_of(run)), timeout=5)
                except grpc.aio.AioRpcError as exc:  # died before its insert: never stored, never sent
                    assert exc.code() == grpc.StatusCode.NOT_FOUND
                    assert sim.creates[action_of(run)] == 0
                    continue
                stored_early += 1
                settled = await wait_for(watch, action_of(run), SETTLED, timeout=15)
                assert settled.state == pb.EFFECT_STATE_CONFIRMED, settled
                assert settled.receipt.external_id == ledger_id(sim, action_of(run))
            assert stored_early >= 1  # at least the one that hit the crash point
        finally:
            for channel in (doomed_ch, early_ch, watch_ch):
                await channel.close(grace=None)
    effects = effects_by_action(sim)
    assert all(count == 1 for count in effects.values()), effects
    assert len(effects) == len(doomed_runs) + stored_early


# -- 3. a paused replica loses its lease and cannot write when it wakes up ----------------------


# SIGSTOP on PostgreSQL: the guarded write refused on a real database. Where else a replica may
# stand still longer than its lease (after recording DISPATCHED, before sending: the other proves
# absence and sends attempt 2; at any store or provider call) is the simulator's stall
# (tests/sim/replicas.py), each write checked against the fence.
@pytest.mark.parametrize(
    ("point", "sent_before_pause", "final_attempts"),
    [
        # Stopped after the provider committed, before storing the receipt: the other replica
        # finds the charge by read-back and confirms it without sending.
        ("after_provider_commit", 1, 1),
    ],
)
async def test_paused_replica_is_fenced_out(
    tmp_path: Path, pg_dsn: str, sim: CountingStripe, point: str, sent_before_pause: int, final_attempts: int
) -> None:
    config = replica_config(tmp_path, pg_dsn, sim)
    stale, other = GatewayProcess(config, pause_at=point), GatewayProcess(config)
    action = action_of("run-pause")
    async with running(stale, other):
        stale_ch = grpc.aio.insecure_channel(stale.target)
        other_ch = grpc.aio.insecure_channel(other.target)
        try:
            call = asyncio.ensure_future(stub_for(stale_ch).Execute(charge("run-pause", call="c-stale"), timeout=30))
            await wait_stopped(stale)
            watch = stub_for(other_ch)
            paused = await watch.GetAction(pb.GetActionRequest(action_id=action), timeout=5)
            assert paused.state == pb.EFFECT_STATE_DISPATCHED and paused.attempts == 1
            assert sim.creates[action] == sent_before_pause
            assert len(sim.ledger) == sent_before_pause

            # No agent calls again: the other replica's reconciler takes the expired lease over.
            taken = await wait_for(watch, action, SETTLED, timeout=10)
            assert taken.state == pb.EFFECT_STATE_CONFIRMED, taken
            assert taken.attempts == final_attempts
            assert sim.creates[action] == 1 and len(sim.ledger) == 1
            assert taken.receipt.external_id == sim.ledger[0]["id"]
            assert stale.proc.poll() is None and not call.done()

            stale.proc.send_signal(signal.SIGCONT)
            answer = await call  # the stale replica answers with what the store holds
            await asyncio.sleep(4 * 0.2 + 0.5)  # its reconciler passes, had it anything left to do
            after = await watch.GetAction(pb.GetActionRequest(action_id=action), timeout=5)
        finally:
            await stale_ch.close(grace=None)
            await other_ch.close(grace=None)
        assert stale.proc.poll() is None  # it carried on; it just could not write
    # Its conditional write (fence of its own, expired lease) was refused, so it stopped.
    assert f"lease on {action} lost to another worker" in "".join(stale.output)
    assert after == taken  # no second dispatch recorded, the first receipt kept, nothing rewritten
    assert answer.action.state == pb.EFFECT_STATE_CONFIRMED
    assert answer.action.receipt == taken.receipt and answer.action.attempts == final_attempts
    assert sim.creates[action] == 1 and len(sim.ledger) == 1


# -- 4. PostgreSQL restarted under a stream of Executes -----------------------------------------


async def test_postgres_restart_fails_closed_and_settles(
    tmp_path: Path, pg_restartable_server: pg.PgServer, sim: CountingStripe
) -> None:
    """Accepted answers during the run: OK, or UNAVAILABLE carrying the gateway's own
    STORE_UNAVAILABLE ErrorInfo (it failed closed), STORE_UNAVAILABLE_AFTER_SEND for a call whose
    request had reached the provider when the database died. Every call has a client deadline only as a
    hang guard (20 s, twice the tool's deadline): a DEADLINE_EXCEEDED would be a gateway stuck on
    a dead database and fails the test, as does any other code (INTERNAL, ABORTED, ...)."""
    sim.latency = 0.3  # most of each call is spent at the provider, so some are there at the kill
    name, dsn = await pg.create_database(pg_restartable_server.dsn)
    gateway = GatewayProcess(replica_config(tmp_path, dsn, sim))
    # run -> [(phase when the call began, code, receipt external id)]
    outcomes: dict[str, list[tuple[str, grpc.StatusCode, str]]] = {}
    # run -> (reason, when the UNAVAILABLE answer came back: time.monotonic())
    refusals: dict[str, tuple[str, float]] = {}
    phase = "before"
    stop = asyncio.Event()
    counter = iter(range(1_000_000))

    async def stream(stub: gateway_pb2_grpc.EffectGatewayAsyncStub) -> None:
        while not stop.is_set():
            run = f"run-pg{next(counter)}"
            started = phase
            try:
                answer = await stub.Execute(charge(run), timeout=20)
                outcomes.setdefault(run, []).append((started, grpc.StatusCode.OK, answer.action.receipt.external_id))
                assert answer.action.state == pb.EFFECT_STATE_CONFIRMED, answer
            except grpc.aio.AioRpcError as exc:
                refusals[run] = (error_reason(exc), time.monotonic())
                outcomes.setdefault(run, []).append((started, exc.code(), ""))
                assert exc.code() == grpc.StatusCode.UNAVAILABLE, (run, exc)
                # Before the send, or after it (the charge may have left: its own reason).
                assert error_reason(exc) in ("STORE_UNAVAILABLE", "STORE_UNAVAILABLE_AFTER_SEND"), (run, exc)
                await asyncio.sleep(0.05)

    try:
        async with running(gateway), grpc.aio.insecure_channel(gateway.target) as channel:
            stub = stub_for(channel)
            workers = [asyncio.ensure_future(stream(stub)) for _ in range(4)]
            await asyncio.sleep(1.0)
            phase = "stopping"  # calls started now may meet the server alive, dying or gone
            # A request at the provider when the database dies, whatever the machine's load: the
            # creates arriving from now on wait at the provider until the database is down.
            hold = sim.hold = asyncio.Event()
            await asyncio.wait_for(sim.held.wait(), 20)
            await asyncio.to_thread(pg_restartable_server.stop, "immediate")
            phase = "outage"
            sim.hold = None
            hold.set()
            await asyncio.sleep(1.5)
            phase = "starting"
            await asyncio.to_thread(pg_restartable_server.start)
            phase = "after"
            await asyncio.sleep(2.0)
            stop.set()
            await asyncio.gather(*workers)
            sent = Counter(sim.creates)

            codes = Counter((p, c) for seen in outcomes.values() for p, c, _ in seen)
            assert codes[("before", grpc.StatusCode.OK)] > 0, codes
            assert codes[("outage", grpc.StatusCode.UNAVAILABLE)] > 0, codes
            assert codes[("outage", grpc.StatusCode.OK)] == 0, codes
            assert codes[("after", grpc.StatusCode.OK)] > 0, codes  # recovered with no restart
            # Failed closed: an Execute that began with the database down sent nothing.
            for run, seen in outcomes.items():
                if seen[0][0] == "outage":
                    assert sent[action_of(run)] == 0, run
            # Each reason tells the truth about the call it answered: AFTER_SEND only when that
            # call's request had reached the provider before the answer came back, and the plain
            # reason only when none had (a later send can only be the reconciler's, after it).
            for run, (reason, answered) in refusals.items():
                reached = [at for at in sim.arrivals.get(action_of(run), []) if at <= answered]
                if reason == "STORE_UNAVAILABLE_AFTER_SEND":
                    assert reached, (run, reason)
                else:
                    assert not reached, (run, reason, reached, answered)

            # Re-issue every action (same run, step, scope); an UNAVAILABLE now can only be a
            # pooled connection the restart killed, so it is retried. An action still DISPATCHED
            # (its drive ran out of time reading back, as on a loaded machine in pair U2) is
            # called again, as an agent does: the next call drives it on.
            async def settle(run: str) -> pb.Action:
                async with asyncio.timeout(60):
                    while True:
                        try:
                            answer = (await stub.Execute(charge(run, call="again"), timeout=15)).action
                            if answer.state != pb.EFFECT_STATE_DISPATCHED:
                                return answer
                        except grpc.aio.AioRpcError as exc:
                            assert exc.code() == grpc.StatusCode.UNAVAILABLE, (run, exc)
                        await asyncio.sleep(0.2)

            final = dict(zip(outcomes, await asyncio.gather(*(settle(r) for r in outcomes)), strict=True))
    finally:
        with contextlib.suppress(Exception):
            await pg.drop_database(pg_restartable_server.dsn, name)

    effects = effects_by_action(sim)
    assert all(count == 1 for count in effects.values()), effects  # never a duplicate
    for run, action in final.items():
        assert action.state == pb.EFFECT_STATE_CONFIRMED, action
        assert effects[action_of(run)] == 1
        assert action.receipt.external_id == ledger_id(sim, action_of(run))
        for _, code, external_id in outcomes[run]:
            if code == grpc.StatusCode.OK:  # never a lost or replaced receipt
                assert action.receipt.external_id == external_id
    assert set(effects) == {action_of(r) for r in final}
    # Nothing was sent for an action without its effect, and every send of an action carried its
    # one key. A charge is usually sent once; on a loaded machine a drive that runs out of time
    # leaves it DISPATCHED, and the next call sends it again with that key (alone, in C4): the
    # provider applied it once (above).
    assert set(sim.creates) == set(effects)
    assert all(len(sim.sent_keys[action]) == 1 for action in effects), sim.sent_keys
    # Some calls were at the provider when the database died (held there: see `hold`): the charge
    # happened, the receipt could not be stored, the caller got UNAVAILABLE; the re-issue verified
    # and confirmed them.
    assert any(sent[action_of(r)] and all(c != grpc.StatusCode.OK for _, c, _ in seen) for r, seen in outcomes.items())
