"""effectgate. The agent runtime injects the run context (run id, the logical step id, the
agent's name) and the model's tool call goes through a real gateway via the generated client.
Its consistency window is the shared wait (margin x the lag it is told), like every method's.
The gateway is an `effectgate serve` child process (a service of its own, on its own
core); with `--crash` it is kill -9'd and restarted at seeded moments, and its reconciler
finishes what the dead one started."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
from pathlib import Path
from typing import Any

import grpc

from effectgate.client import EffectGateClient
from effectgate.client.context import RunContext
from effectgate.gateway.core import quantile
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.chaos.methods.method import Answer, Method, Run
from effectgate_lab.chaos.model import Told
from effectgate_lab.chaos.process import ChildGateway, free_port
from effectgate_lab.chaos.scenarios import Provider
from effectgate_lab.simulators.faults import FaultPlan

CALL_TIMEOUT = 4.0
SETTLE_BUDGET = 12.0  # how long the reconciler gets once the faults stopped
KILLS_PER_CELL = 2
TERMINAL = (pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED)
RECONNECT = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]
# The simulators apply a write when it arrives, never after its connection closed: the bound
# on how long they keep processing is their event loop's lag, not the adapters' default minute.
KEEPS_PROCESSING = 1.0
PATIENCE = 15.0  # how long the runtime keeps trying to reach a restarting gateway


def attempt_timeout(run: Run) -> float:
    """1.5 s for the HTTP providers (their calls time out at 2 s); an MCP call's time likewise."""
    return run.scenario.call_timeout - 0.5


def tool_name(run: Run) -> str:
    return f"{run.scenario.name}_{run.episode.seed}"


# `--window auto`: writes through the gateway to a simulator of the same provider before the cell
# (its history with that provider), with every confirmed write followed by read-backs.
WARMUP_WRITES = 40
WARMUP_SEED = 1_000_000
MIN_SAMPLES = 10
AUTO: dict[str, object] = {"sample_every": 1, "min_samples": MIN_SAMPLES, "floor": "0.05s", "margin": 0.5}


def gateway_doc(
    runs: list[Run], store_url: str, listen: str, *, auto: bool = False, warmup_url: str = "", unique: bool = False
) -> dict[str, Any]:
    adapters, tools = {}, {}
    learn = {"lag_key": f"chaos-{runs[0].scenario.name}"} if auto else {}
    # One action per (tenant, tool, scope): the tool is the episode's own, the scope its object.
    limits = {"limits": {"unique": "scope"}} if unique else {}
    attempt = attempt_timeout(runs[0])
    for run in runs:
        adapters[f"a{run.episode.seed}"] = run.scenario.adapter(run.sim.base_url, run.wait)
        tools[tool_name(run)] = {
            "adapter": f"a{run.episode.seed}",
            "consistency_window": "auto" if auto else run.wait,
            "attempt_timeout": attempt,
            "deadline": 2 * attempt,
            "max_attempts": 3,
            "keeps_processing": KEEPS_PROCESSING,
            **learn,
            **limits,
        }
    if warmup_url:
        adapters["warmup"] = runs[0].scenario.adapter(warmup_url, runs[0].wait)
        tools["warmup"] = {**tools[tool_name(runs[0])], "adapter": "warmup"}
    extra: dict[str, Any] = {"consistency": dict(AUTO)} if auto else {}
    return {
        **extra,
        "server": {"listen": listen, "shutdown_grace": 1.0},
        "store": {"url": store_url},
        "gateway": {
            "lease_ttl": attempt + 0.5,
            "reconcile_interval": 0.2,
            "recheck_min": 0.2,
            "recheck_max": 1.0,
        },
        "adapters": adapters,
        "tools": tools,
    }


class ViaGateway(Method):
    name = "effectgate"
    uses_folder = True  # its store, its config and the socket a crashed gateway restarts on

    def __init__(self) -> None:
        self.child: ChildGateway | None = None
        self.client: EffectGateClient | None = None
        self.crasher: asyncio.Task[None] | None = None
        self.kills = 0
        self._warmup: Provider | None = None

    async def open(self, runs: list[Run], crash: bool) -> None:
        folder = self.cell_folder
        for attempt in range(3):
            # With --crash the gateway is started again where the agents reach it: a Unix socket in
            # the run's directory, which no other process can take between a kill and the restart
            # (a freed port can be). Else a port: a simulator binding port 0 can take the free
            # port before the child binds it, and the start is tried again.
            listen = f"unix:{folder}/gateway.sock" if crash else f"127.0.0.1:{free_port()}"
            warmup_url = await self._start_warmup(runs) if self.window == "auto" else ""
            doc = gateway_doc(
                runs,
                f"sqlite:///{folder}/effects.db",
                listen,
                auto=bool(warmup_url),
                warmup_url=warmup_url,
                unique=self.unique,
            )
            self.child = ChildGateway(write_config(doc, folder / "effectgate.toml"))
            try:
                await self.child.start()
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        if crash:
            first = runs[0].episode
            rng = random.Random(f"crash:{first.part}:{first.level}:{first.scenario}:{first.behaviour}:{len(runs)}")
            moments = sorted(rng.uniform(0.1, 2.5) for _ in range(KILLS_PER_CELL))
            self.crasher = asyncio.create_task(self._crash(moments))
        # Reconnect quickly after a kill -9 (gRPC's default back-off grows to minutes).
        channel = grpc.aio.insecure_channel(listen, options=RECONNECT)  # HOST:PORT or unix:PATH
        self.client = EffectGateClient(channel)
        if self._warmup is not None:
            lags = await self._warm_up(runs[0], folder / "effects.db")
            p99 = quantile(lags, 0.99)
            note = f"window auto: {len(lags)} read lags learned in the warm-up, p99 {p99:.3f}s"
            for run in runs:
                run.notes.append(note)

    async def _start_warmup(self, runs: list[Run]) -> str:
        """A simulator of the cell's provider, under the cell's fault level and lag."""
        if self._warmup is None:
            first = runs[0]
            plan = FaultPlan.study_level(first.episode.level, seed=WARMUP_SEED)
            self._warmup = first.scenario.make_sim(plan, first.lag, first.lag)
            await self._warmup.start()
        return self._warmup.base_url

    async def _warm_up(self, like: Run, db: Path) -> list[float]:
        """The gateway's history with the provider: WARMUP_WRITES writes through it, then a wait
        (bounded) until the read-back probes of the answered ones have recorded their lags."""
        assert self.client is not None
        scenario = like.scenario

        async def one(n: int) -> None:
            typed = scenario.typed(scenario.args(WARMUP_SEED + n, False))
            context = RunContext(run_id=f"warmup-{n}", step_id="warmup", agent="warmup")
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self.client.execute(  # type: ignore[union-attr]
                    "warmup",
                    scenario.payload(typed),
                    scope=scenario.scope(typed),
                    context=context,
                    timeout=CALL_TIMEOUT,
                )

        for batch in range(0, WARMUP_WRITES, 8):
            await asyncio.gather(*(one(n) for n in range(batch, min(batch + 8, WARMUP_WRITES))))
        loop = asyncio.get_running_loop()
        end, last = loop.time() + 10 * like.lag + 5, -1
        while loop.time() < end:  # until the probes stop adding lags
            await asyncio.sleep(max(like.lag, 0.2))
            count = len(_lags(db))
            if count == last and count >= MIN_SAMPLES:
                break
            last = count
        return _lags(db)

    async def _crash(self, moments: list[float]) -> None:
        assert self.child is not None
        start = asyncio.get_running_loop().time()
        for moment in moments:
            await asyncio.sleep(max(0.0, start + moment - asyncio.get_running_loop().time()))
            await self.child.kill()
            self.kills += 1
            await self.child.start()

    async def quiesce(self) -> None:
        if self.crasher is not None:
            # Let a restart in progress finish; no kill after the agents are done.
            self.crasher.cancel()
            await asyncio.gather(self.crasher, return_exceptions=True)
            if self.child is not None and not self.child.alive:
                await self.child.start()

    async def close(self) -> None:
        if self._warmup is not None:
            await self._warmup.stop()
        if self.client is not None:
            await self.client.close()
        if self.child is not None:
            await self.child.terminate()

    async def _execute(self, run: Run, agent: str, step: str, call_id: str, args: dict[str, Any]) -> pb.ExecuteResponse:
        assert self.client is not None
        typed = run.scenario.typed(args)
        return await self.client.execute(
            tool_name(run),
            run.scenario.payload(typed),
            scope=run.scenario.scope(typed),
            tool_call_id=call_id,
            context=RunContext(run_id=run.episode.run_id, step_id=step, agent=agent),
            timeout=max(CALL_TIMEOUT, 2 * attempt_timeout(run) + 1),
        )

    async def _retrying(
        self, run: Run, agent: str, step: str, call_id: str, args: dict[str, Any]
    ) -> pb.ExecuteResponse | None:
        end = asyncio.get_running_loop().time() + PATIENCE
        for attempt in range(100):
            try:
                return await self._execute(run, agent, step, f"{call_id}-{attempt}", args)
            except grpc.aio.AioRpcError as err:
                run.notes.append(f"{call_id}: {err.code().name}")
                if asyncio.get_running_loop().time() >= end:
                    break
                await asyncio.sleep(0.3)
        return None

    async def call(self, run: Run, agent: str, step: str, call_id: str, args: dict[str, Any]) -> Answer:
        try:
            answer = await self._execute(run, agent, step, call_id, args)
        except grpc.aio.AioRpcError as err:
            if err.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
                run.notes.append(f"{call_id}: {err.code().name}: {err.details()}")
            # Unavailable (a restart), deadline, in flight: the outcome is not known yet.
            await asyncio.sleep(0.3)
            return Answer(Told.UNKNOWN, final=False, detail=err.code().name)
        return _answer(answer.action)

    async def settle(self, run: Run, told: Told) -> Told:
        """The reconciler had its chance: the resumed agent asks for each step again (the stored
        outcome, never a new effect) and, while the answer is not final, waits (bounded) for the
        reconciler to make the action terminal and asks once more."""
        if told is not Told.UNKNOWN:
            return told
        loop = asyncio.get_running_loop()
        end = loop.time() + SETTLE_BUDGET
        answers = [await self._settle_step(run, step, end) for step in sorted(run.steps)]
        if Told.SUCCESS in answers:
            return Told.SUCCESS
        return Told.UNKNOWN if Told.UNKNOWN in answers or not answers else Told.FAILURE

    async def _settle_step(self, run: Run, step: str, end: float) -> Told:
        assert self.client is not None
        args = run.scenario.args(run.episode.seed, False)
        loop = asyncio.get_running_loop()
        while True:
            answer = await self._retrying(run, "agent", step, "call-resume", args)
            if answer is None:
                return Told.UNKNOWN
            final = _answer(answer.action)
            if final.detail:
                run.notes.append(f"{step} after the faults: {final.told.value} ({final.detail})")
            if final.told is not Told.UNKNOWN or loop.time() >= end:
                return final.told
            while loop.time() < end:  # the reconciler re-checks on its own schedule
                await asyncio.sleep(0.2)
                try:
                    if (await self.client.get(answer.action.action_id)).state in TERMINAL:
                        break
                except grpc.aio.AioRpcError:
                    continue  # the gateway may be restarting


def _lags(db: Path) -> list[float]:
    try:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            return [float(row[0]) for row in conn.execute("SELECT lag FROM read_lags")]
    except sqlite3.Error:
        return []


def _answer(action: pb.Action) -> Answer:
    if action.state == pb.EFFECT_STATE_CONFIRMED:
        # A success after several dispatches is worth a note: why the gateway sent again.
        detail = f"{action.attempts} dispatches: {action.reason}" if action.attempts > 1 else ""
        return Answer(Told.SUCCESS, final=True, detail=detail)
    if action.state == pb.EFFECT_STATE_REJECTED:
        return Answer(Told.FAILURE, final=True, detail=action.reason)
    # UNKNOWN, in flight, waiting: the gateway says so, and the model may ask again.
    return Answer(Told.UNKNOWN, final=False, detail=pb.EffectState.Name(action.state))
