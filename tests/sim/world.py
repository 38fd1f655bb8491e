"""One simulated world for one seed: a store, a provider, replicas, agents and operators on a
virtual-time loop, every draw from the seed, every event in a trace, the invariants checked after
each (`checks.py`). `World(seed).run()` returns the trace and the violations found."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from effectgate.gateway.model import ActionRecord, State
from effectgate.gateway.store import rows
from effectgate.testing.sim.loop import Deadlock, VirtualLoop
from effectgate.testing.sim.provider import Effect, Hookable, SimProvider
from effectgate.testing.sim.store import SimDatabase, SimStore, StoreFaults
from tests.sim import checks, config, upstream
from tests.sim.acts import CURRENT, Acts
from tests.sim.caller import Caller, close_unstarted, retrieve_pending
from tests.sim.checks_more import MoreChecks
from tests.sim.notices import Notices
from tests.sim.reloads import Reloads
from tests.sim.replicas import SimReplica
from tests.sim.tenants import Tenants
from tests.sim.webhooks import Webhooks
from tests.sim.workload import Workload

# What a leftover task's `finally` meets when it runs after its run, outside its loop and context.
_LEFTOVER_ERRORS = (
    "Event loop is closed",
    "was created in a different Context",
    "no running event loop",
    "GeneratorExit",
)


def _quiet_leftovers(hook: object = sys.unraisablehook) -> None:
    """A finished run leaves its crashed replicas' tasks frozen; when they are collected, their
    `finally` blocks run on a closed loop or outside their context. That is not the world's
    concern: those errors are dropped, any other goes to the default hook."""

    def filtered(unraisable: sys.UnraisableHookArgs) -> None:
        text = str(unraisable.exc_value)
        if any(k in text for k in _LEFTOVER_ERRORS):
            return
        hook(unraisable)  # type: ignore[operator]

    sys.unraisablehook = filtered
    # The tracing library logs the same leftovers ("Failed to detach context") when they end.
    logging.getLogger("opentelemetry.context").addFilter(lambda record: "detach" not in record.getMessage())
    # A crashed replica's waits feed, closed by the collector inside its generator, says so.
    logging.getLogger("effectgate.waits").addFilter(
        lambda record: "lost their feed: RuntimeError" not in record.getMessage()
    )


_quiet_leftovers()

# What a read lag past the declared window may cause (the documented limit, docs/testing.md): an
# absence that looks proven, so NOT_FOUND while applied, a re-send and a second effect, and the
# limits' counters short of the ledger. In the `beyond_window` mode these are counted apart
# (`past_window`), once the provider has shown such a lag; every other violation stays one.
PAST_WINDOW = (
    "NOT_FOUND while",
    "NOT_FOUND in the store",
    "two effects for one",
    "generations of effects",
    "counters show",
    "limit exceeded",
)

# A run that has not ended after this much virtual time is stuck (a liveness violation).
LIFETIME = 3600.0


# A seed's size, when the knobs leave it open (`sized`): one seed in FULL_ODDS has the full world
# (FULL agents of FULL_STEPS logical actions each, about 150 events), the others a small one (2 or
# 3 agents of SMALL_STEPS, about 50 to 75 events): many more worlds in a budget, and still the
# full world's crowding (limits reached, many actions per tenant) in every fifth of them.
FULL_ODDS = 0.2
FULL, FULL_STEPS = 5, 3
SMALL, SMALL_STEPS = (2, 3), 2


@dataclass(frozen=True)
class Knobs:
    replicas: int = 2
    third_replica: float = 0.2  # a seed's chance of one more replica (when `replicas` is 2)
    agents: int | None = None  # None: drawn from the seed (`sized`)
    steps: int | None = None  # logical actions per agent; None: drawn from the seed
    crash_odds: float = 0.35  # a replica's chance to crash at some call of its life
    settle: float = 150.0  # virtual seconds of the final phase with no faults and no crashes
    beyond_window: float = 0.0  # read lag past the declared window (the documented limit)
    # Fault kinds switched off (FAULT_KINDS): the shrinker's way to a shorter trace that still fails.
    off: frozenset[str] = frozenset()


def sized(seed: int, knobs: Knobs) -> Knobs:
    """`knobs` with the agents and steps it leaves open drawn from the seed (a draw of its own:
    the same world as one given those numbers, `--agents A --steps S`)."""
    if knobs.agents is not None and knobs.steps is not None:
        return knobs
    rng = random.Random(f"size:{seed}")
    agents, steps = (FULL, FULL_STEPS) if rng.random() < FULL_ODDS else (rng.choice(SMALL), SMALL_STEPS)
    return replace(
        knobs,
        agents=agents if knobs.agents is None else knobs.agents,
        steps=steps if knobs.steps is None else knobs.steps,
    )


# The full world of every seed (`FULL` agents of `FULL_STEPS`): the worlds the regressions of
# seeds found before sizes were drawn replay.
WHOLE = Knobs(agents=FULL, steps=FULL_STEPS)


# Each fault kind a run can switch off: the provider's answers (ProviderOdds' fields), the store's
# statements, the replicas' crashes and stalls.
PROVIDER_FAULTS = (
    "lost",
    "error_after",
    "error_before",
    "key_in_use",
    "rate_limited",
    "declined",
    "partial",
    "slow",
    "verify_error",
)
STORE_FAULTS = ("unavailable", "commit_unknown", "slow")
# What agents and operators do beyond new actions, retries, approvals and reconciles (acts.py);
# switched off, with "failpoint" and "webhook", a seed's world is as it was before they existed.
ACTS = ("wait", "limit_grant", "bypass", "once", "tenant", "reload", "notify", "mcp")
# Switched off, the world of a seed found before these existed (the regressions of seeds 122, 847
# and 1440 replay their worlds exactly).
LATER = frozenset({*ACTS, "failpoint", "webhook"})
# The MCP upstream's own (upstream.py): sessions it forgets, a 404 that is not about the session.
MCP_FAULTS = ("session_forgotten", "misrouted_404")
FAULT_KINDS = (
    *ACTS,
    "crash",
    "failpoint",
    "stall",
    "webhook",
    *(f"store_{k}" for k in STORE_FAULTS),
    *PROVIDER_FAULTS,
    *MCP_FAULTS,
)


@dataclass
class Outcome:
    seed: int
    trace: list[str]
    violations: list[str]
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()


class World:
    def __init__(self, seed: int, knobs: Knobs | None = None) -> None:
        self.seed = seed
        self.knobs = sized(seed, knobs or Knobs())
        self.agents, self.steps = self.knobs.agents or 0, self.knobs.steps or 0
        self.rng = random.Random(f"world:{seed}")
        self.loop = VirtualLoop()
        self.loop.set_exception_handler(self._loop_error)
        self.trace: list[str] = []
        self.violations: list[str] = []
        self.counts: Counter[str] = Counter()
        self.db = SimDatabase(self.now)
        # `records()` by the states asked: (the connection's change count then, the records).
        self._records: dict[tuple[State, ...], tuple[int, list[ActionRecord]]] = {}
        self.provider = SimProvider(random.Random(f"provider:{seed}"), self.now)
        self.provider.odds.beyond_window = self.knobs.beyond_window
        self.provider.on_effect = self.on_effect
        self.provider.on_request = self.event
        self.store_faults = StoreFaults(random.Random(f"store:{seed}"), asyncio.sleep)
        self._switch_off(self.knobs.off)
        names = config.UNSCOPED if "once" in self.knobs.off else tuple(config.TOOLS)
        self.adapters: dict[str, Hookable] = dict(config.adapters(self.provider, names))
        # In some worlds, an MCP upstream through the real `mcp` adapter (upstream.py).
        self.upstream = upstream.Upstream(self) if upstream.present(seed, self.knobs.off) else None
        if self.upstream is not None:
            names = (*names, upstream.MESSAGE)
            self.adapters[upstream.MESSAGE] = upstream.SimMcpAdapter(self.upstream)
        self.config_names = names
        self.notices = Notices(self)  # before the config: whether this seed has [[notify]]
        # Version 2 once the world redeploys (reloads.py).
        self.config = config.config(names, 1, self.notices.on)
        self.replicas: list[SimReplica] = []
        # Where crashed replicas' tasks stand still, kept until the run ends (replicas._forever).
        self.frozen: list[asyncio.Future[None]] = []
        self.ended = False
        self.faulty = True
        self.crashes_on = True
        self.acts = Acts(self)
        self.tenants = Tenants(self)
        self.reloads = Reloads(self)
        self.workload = Workload(self)
        self.watch = checks.Watch(self)
        self.checks_more = MoreChecks(self)
        self.webhooks = Webhooks(self)

    def _switch_off(self, kinds: frozenset[str]) -> None:
        unknown = kinds - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"no fault kind(s) {sorted(unknown)}: the kinds are {', '.join(FAULT_KINDS)}")
        for kind in kinds & set(PROVIDER_FAULTS):
            setattr(self.provider.odds, kind, 0.0)
        for kind in STORE_FAULTS:
            if f"store_{kind}" in kinds:
                setattr(self.store_faults, kind, 0.0)

    # -- time, trace ----------------------------------------------------------------------------

    def now(self) -> float:
        return config.EPOCH + self.loop.time()

    def event(self, what: str) -> None:
        self.trace.append(f"{self.loop.time():.6f} {what}")

    def violation(self, what: str) -> None:
        if self.provider.counts["read_lag_beyond_window"] and any(k in what for k in PAST_WINDOW):
            self.counts["past_window"] += 1
            self.event(f"PAST WINDOW {what}")
            return
        if what not in self.violations:
            self.violations.append(what)
            self.event(f"VIOLATION {what}")

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        message = str(context.get("message", ""))
        if "was destroyed but it is pending" in message:  # a crashed replica's frozen tasks
            return
        if self.ended and "generator is already running" in repr(context.get("exception")):
            # Collected after the run: a crashed replica's frozen waits feed, closed by the
            # garbage collector inside its generator (no process ever sees that).
            return
        self.violation(f"loop error: {message} {context.get('exception')!r}")

    # -- replicas -------------------------------------------------------------------------------

    def _crash_plan(self) -> tuple[int | None, bool]:
        if not self.crashes_on or self.rng.random() >= self.knobs.crash_odds or "crash" in self.knobs.off:
            return None, False
        return self.rng.randint(2, 120), self.rng.random() < 0.5

    async def start_replica(self) -> None:
        number = len(self.replicas) + 1
        crash_at, after = self._crash_plan()
        replica = SimReplica(self, number, crash_at, after)
        self.replicas.append(replica)
        self.acts.plan(replica)
        self.event(f"start {replica.name} skew={replica.skew:+.4f} crash_at={crash_at} after={after}")
        while not replica.dead:
            token = CURRENT.set(replica)  # its background tasks run as this replica
            self.reloads.started(replica)  # the config version it starts with
            try:
                outcome = await Caller.operate(replica.start(self.config, self.adapters), replica.died)
            finally:
                CURRENT.reset(token)
            if outcome is None:
                return
            # A store fault at start-up: the process exits and is started again (or it crashed).
            self.event(
                f"start {replica.name} failed: {outcome if isinstance(outcome, str) else type(outcome).__name__}"
            )
            await asyncio.sleep(1.0)

    def crashed(self, replica: SimReplica) -> None:
        self.loop.create_task(self._restart(replica))

    async def _restart(self, replica: SimReplica) -> None:
        await asyncio.sleep(self.rng.random() * 10)
        await self.start_replica()

    def alive(self) -> list[SimReplica]:
        return [r for r in self.replicas if not r.dead and r.gateway is not None]

    # -- ground truth ---------------------------------------------------------------------------

    def records(self, *states: State) -> list[ActionRecord]:
        """The stored actions (in `states` only, when given), in action id order. Read again only
        once a statement changed a row since the same question was last asked (the operator asks
        every few virtual seconds, most often of a store nobody wrote in between)."""
        changes = self.db.conn.total_changes
        kept = self._records.get(states)
        if kept is not None and kept[0] == changes:
            return list(kept[1])
        where = f" WHERE state IN ({', '.join(repr(s.value) for s in states)})" if states else ""
        found = self.db.conn.execute(f"SELECT {rows.SELECTED} FROM actions{where} ORDER BY action_id").fetchall()
        records = [rows.record(r) for r in found]
        self._records[states] = (changes, records)
        return list(records)

    def on_effect(self, effect: Effect) -> None:
        self.event(f"effect {effect.number} {effect.tool} {effect.action_id[:12]} amount={effect.amount}")
        self.watch.effect(effect)
        self.checks_more.effect(effect)
        self.webhooks.effect(effect)
        self.reloads.effect(effect)

    def after_write(self) -> None:
        self.watch.store()

    # -- the run --------------------------------------------------------------------------------

    async def _main(self) -> None:
        if self.upstream is not None:
            await self.upstream.start()
        third = self.knobs.replicas == 2 and self.rng.random() < self.knobs.third_replica
        for _ in range(self.knobs.replicas + third):
            await self.start_replica()
        rolling = self.loop.create_task(self.reloads.run())
        await self.workload.run()
        rolling.cancel()
        # The final phase: no faults, no crashes, one replica at least, time to settle.
        self.faulty = False
        self.crashes_on = False
        self.provider.quiet()
        self.event("settling")
        if not self.alive():
            await self.start_replica()
        until = self.loop.time() + self.knobs.settle
        while self.loop.time() < until and not (self.watch.quiet() and self.notices.quiet()):  # noqa: ASYNC110
            await asyncio.sleep(2.0)
        self.event("settled")
        self.watch.settled()
        self.checks_more.settled()
        self.tenants.settled()
        self.reloads.settled()
        self.notices.settled()
        await self.watch.chain(SimStore(self.db))
        for replica in self.alive():
            assert replica.gateway is not None
            replica.dead = True  # stop it where it stands: the run is over
        self.event(f"end effects={len(self.provider.ledger)} records={len(self.records())}")
        if self.upstream is not None:
            await self.upstream.shutdown()

    async def _bounded(self) -> None:
        try:
            async with asyncio.timeout(LIFETIME):
                await self._main()
        except TimeoutError:
            self.violation(f"the run did not end within {LIFETIME:g} virtual seconds")

    def _close_frozen(self) -> None:
        """The frozen tasks (replicas._forever) end with the run, in the order they froze: their
        coroutines closed as the garbage collector closes them, but at one moment and in one order.
        Left to the collector, the moment and the order were its own (how much a process had
        allocated before): a crashed replica's frozen wait could be finalized after its answer's
        future, which the wait's `finally` reads, and "Future exception was never retrieved" was
        a violation in one run of seeds and not in another (seed 1708 of the budget).
        Then every other task still pending, in the order the loop created them: a task that stood
        still in a stall or a sleep when the run ended (its timer never fires) was the collector's
        too, and so was a crashed replica's wait whose feed had handed it the store's error, read
        by the wait's `finally` or reported as never retrieved (seed 42176 of the long run)."""
        for future in self.frozen:
            waiting: Any = future  # the task a frozen future holds still (typeshed: no _callbacks)
            for callback, _ in list(waiting._callbacks or ()):
                task = getattr(callback, "__self__", None)
                if isinstance(task, asyncio.Task):
                    self._close(task)
        for task in self.loop.pending_tasks():
            self._close(task)

    def _close(self, task: asyncio.Task[Any]) -> None:
        try:
            task.get_coro().close()
        except Exception as exc:  # what the collector hands to sys.unraisablehook
            text = str(exc)
            if not any(k in text for k in _LEFTOVER_ERRORS):
                print(f"Exception ignored in a leftover task of seed {self.seed}: {exc!r}", file=sys.stderr)

    def run(self) -> Outcome:
        asyncio.set_event_loop(self.loop)
        # The gateway's own logs (every fault it meets) would dwarf the trace; restored after.
        # (Each change of the level clears every logger's cache: `run.run` sets it once for all.)
        disabled = logging.root.manager.disable
        if disabled < logging.CRITICAL:
            logging.disable(logging.CRITICAL)
        self.acts.install()
        self.notices.install()
        try:
            self.loop.run_until_complete(self._bounded())
        except Deadlock as exc:
            self.violation(f"deadlock: {exc}")
        finally:
            self.ended = True
            retrieve_pending(self.loop)
            close_unstarted(self.loop)
            self.acts.uninstall()
            self.notices.uninstall()
            asyncio.set_event_loop(None)
            self.loop.close()
            self._close_frozen()
            if self.upstream is not None:
                self.upstream.release(self.loop)
            if disabled < logging.CRITICAL:
                logging.disable(disabled)
        counts = Counter(self.counts)
        counts.update(self.provider.counts)
        counts.update(self.store_faults.counts)
        counts["events"] = len(self.trace)
        self.db.close()
        return Outcome(self.seed, self.trace, self.violations, counts)
