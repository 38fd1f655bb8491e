"""What the simulated world does beyond `workload.py`'s agents and operators (issue 44, item 6):
agents that wait on an action (WaitAction) instead of calling again, operators who grant a limit
to a refused call and a bypass (a second effect) to a settled one, agents whose scope names a
business object (`unique = "scope"`: two runs on one invoice), and crashes at the product's named
failpoints (`core/failpoints.py`: the durable states a SIGKILL leaves behind).

Each act draws from its own seeded stream, so adding one does not move the others' draws more
than it must; each outcome is an event of the trace, checked by `checks_more.py`."""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from effectgate.gateway.core import failpoints
from effectgate.gateway.core.operators.waits import decided, settled
from effectgate.gateway.core.protocol.execute import ExecuteCommand, ExecuteResult
from effectgate.gateway.model import ActionRecord, GatewayError, PolicyConflict, State
from effectgate.gateway.model.errors import InvalidRequest
from effectgate.gateway.model.limits import LimitExceeded
from tests.sim.caller import Caller

if TYPE_CHECKING:
    from tests.sim.replicas import SimReplica
    from tests.sim.world import World

TENANT = "dev"
# The replica whose code runs in the current task (a failpoint names no process: this does).
CURRENT: contextvars.ContextVar[SimReplica | None] = contextvars.ContextVar("sim_replica", default=None)
# A replica's chance to be killed at one of the named failpoints (at its 1st..3rd pass there).
FAILPOINT_ODDS = 0.3
POINTS = failpoints.POINTS  # and the notify points in a world with the deliverer (notices.py)
# At most this many bypass grants a world (each one a second effect of a settled `pay` action).
BYPASSES = 2
NON_FINAL = frozenset({State.AWAITING_APPROVAL, State.UNKNOWN, State.DISPATCHED, State.PLANNED})


class Acts:
    def __init__(self, world: World) -> None:
        self.world = world
        # What operators let past the protocol's promises, the ground truth of `checks_more`:
        # bypass grants that may have committed, by action; limit grants that may have committed.
        self.bypasses: Counter[str] = Counter()
        self.limit_grants: set[str] = set()
        self.plans: dict[str, tuple[str, int]] = {}
        self.passes: Counter[tuple[str, str]] = Counter()
        self.tasks: list[asyncio.Task[None]] = []
        self._rng = random.Random(f"acts:{world.seed}")
        self._original: Callable[[str], None] | None = None

    # -- crashes at named failpoints ----------------------------------------------------------

    def install(self) -> None:
        self._original = failpoints.hit
        setattr(failpoints, "hit", self._hit)  # noqa: B010 - the module's function, for this world

    def uninstall(self) -> None:
        if self._original is not None:
            setattr(failpoints, "hit", self._original)  # noqa: B010

    def plan(self, replica: SimReplica) -> None:
        rng = random.Random(f"failpoint:{self.world.seed}:{replica.name}")
        if rng.random() < FAILPOINT_ODDS and "failpoint" not in self.world.knobs.off:
            points = (*POINTS, *failpoints.NOTIFY_POINTS) if self.world.notices.on else POINTS
            self.plans[replica.name] = (rng.choice(points), rng.randint(1, 3))

    def _hit(self, point: str) -> None:
        replica = CURRENT.get()
        if replica is None or replica.dead:
            return
        self.passes[(replica.name, point)] += 1
        if self.plans.get(replica.name) == (point, self.passes[(replica.name, point)]) and self.world.crashes_on:
            self.world.counts[f"failpoint_{point}"] += 1
            # Killed here: its next store or provider call never happens (replicas.Gate).
            replica.crash(f"at failpoint {point}")

    # -- agents ---------------------------------------------------------------------------------

    async def after(self, rng: random.Random, cmd: ExecuteCommand, result: object) -> None:
        """What an agent does with an answer before its next attempt: waits on a non-final action
        now and then; asks an operator for a limit grant when a limit refused it."""
        off = self.world.knobs.off
        if isinstance(result, LimitExceeded):  # its id, for another tenant's operator to name
            self.world.tenants.refused.append((cmd.identity.tenant, str(result.figures.get("action_id", ""))))
        if isinstance(result, ExecuteResult) and result.record.state in NON_FINAL and rng.random() < 0.3:
            if "wait" not in off:
                await self.wait(rng, result.record)
        elif isinstance(result, LimitExceeded) and rng.random() < 0.6 and "limit_grant" not in off:
            await self.grant_limit(str(result.figures.get("action_id", "")), cmd.identity.tenant)

    async def wait(self, rng: random.Random, record: ActionRecord) -> None:
        w = self.world
        replica = _pick(rng, w.alive())
        if replica is None:
            return
        until = decided if record.state is State.AWAITING_APPROVAL else settled
        timeout = rng.choice((1.0, 5.0, 15.0))
        token = CURRENT.set(replica)
        try:
            waiting = replica.running.waits.wait(record.tenant, record.action_id, until, timeout)
            outcome = await Caller.operate(waiting, replica.died, timeout=timeout + 30)
        finally:
            CURRENT.reset(token)
        tag = f"wait {record.action_id[:12]} {until.__name__} {timeout:g}s on {replica.name}"
        if isinstance(outcome, tuple):
            found, reached = outcome
            w.counts["act_wait"] += 1
            w.event(f"{tag}: {found.state.value} reached={reached}")
            w.checks_more.waited(found, reached, until)
        elif isinstance(outcome, GatewayError) or outcome in ("deadline", "gone"):
            w.event(f"{tag}: {outcome if isinstance(outcome, str) else type(outcome).__name__}")
        else:
            w.violation(f"undocumented answer to {tag}: {outcome!r}")

    # -- operators ------------------------------------------------------------------------------

    async def grant_limit(self, action_id: str, tenant: str) -> None:
        w = self.world
        replica = _pick(self._rng, w.alive())
        if replica is None or not action_id:
            return
        self.limit_grants.add(action_id)  # from the call on, it may have committed
        w.tenants.granted[action_id] = tenant
        outcome = await self.as_(replica, replica.running.desk.grant(tenant, action_id, "ops", "month end"))
        w.event(f"operator grant_limit {action_id[:12]} on {replica.name}: {named(outcome)}")
        if isinstance(outcome, BaseException) and not isinstance(outcome, GatewayError):
            w.violation(f"undocumented answer to a limit grant for {action_id}: {outcome!r}")
        if named(outcome) == "ok":
            w.tenants.confirmed[action_id] = tenant
        w.counts["act_limit_grant"] += 1

    async def operate(self, replica: SimReplica) -> None:
        """An operator's look at the settled `pay` actions: now and then a bypass (a second
        effect, wanted), used by the agent that ran the step (twice at once, now and then)."""
        w = self.world
        if "bypass" in w.knobs.off or sum(self.bypasses.values()) >= BYPASSES or self._rng.random() >= 0.1:
            return
        done = [r for r in w.records(State.CONFIRMED, State.REJECTED) if r.tool == "pay"]
        if not done:
            return
        record = self._rng.choice(done)
        self.bypasses[record.action_id] += 1
        outcome = await self.as_(
            replica, replica.running.operations.grant_bypass(record.tenant, record.action_id, "ops", "again")
        )
        w.event(f"operator grant_bypass {record.action_id[:12]} on {replica.name}: {named(outcome)}")
        if isinstance(outcome, (PolicyConflict, InvalidRequest)):
            self.bypasses[record.action_id] -= 1  # refused: nothing committed
            return
        w.counts["act_bypass_grant"] += 1
        copies = 2 if self._rng.random() < 0.3 else 1
        for copy in range(copies):
            self.tasks.append(w.loop.create_task(self._use_bypass(record, copy)))

    async def _use_bypass(self, record: ActionRecord, copy: int) -> None:
        w = self.world
        rng = random.Random(f"bypass:{w.seed}:{record.action_id}:{copy}")
        who = record.identity
        from tests.sim.workload import command  # the workload's command builder (it imports this module)

        cmd = command(who.run_id, who.step_id, who.tool, who.scope, 0, f"bypass.{copy}", tenant=who.tenant)
        cmd = ExecuteCommand(cmd.identity, cmd.payload_type_url, record.payload, bypass=True)
        for _ in range(3):
            result = await w.workload.call(rng, cmd, rng.choice((2.0, 8.0, 20.0)))
            if result is not None and result.record.state in (State.CONFIRMED, State.REJECTED):
                return
            await asyncio.sleep(rng.random() * 10)

    async def finish(self) -> None:
        """The agents using bypasses end with the others."""
        while self.tasks:
            await self.tasks.pop()

    async def as_(self, replica: SimReplica, call: object) -> object:
        token = CURRENT.set(replica)
        try:
            return await Caller.operate(call, replica.died)  # type: ignore[arg-type]
        finally:
            CURRENT.reset(token)


def _pick(rng: random.Random, replicas: list[SimReplica]) -> SimReplica | None:
    return rng.choice(replicas) if replicas else None


def named(outcome: object, ok: str | None = "ok") -> str:
    """How the trace names an act's outcome: the exception's type, a refusal's text, or `ok` for
    anything else (None: the returned object's type)."""
    if isinstance(outcome, BaseException):
        return type(outcome).__name__
    if isinstance(outcome, str):
        return outcome
    return type(outcome).__name__ if ok is None else ok
