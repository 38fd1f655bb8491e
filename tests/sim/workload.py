"""What the simulated world asks of the gateway: agents (new actions, replays after an error or a
non-final answer, re-plans with another payload, concurrent copies on two replicas, a subagent
given the same step beside its parent, short deadlines) and operators (approve, sometimes on a
stale view of the payload, deny, reconcile an UNKNOWN from the provider's own ledger). Each act
and its answer is an event of the trace."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from effectgate.gateway.core import ExecuteCommand, ExecuteResult
from effectgate.gateway.model import ActionIdentity, ActionNotFound, ActionRecord, GatewayError, State, keys
from effectgate.tools.v1 import tools_pb2
from tests.sim import upstream
from tests.sim.acts import CURRENT, named
from tests.sim.caller import Caller
from tests.sim.checks_more import of_generation

if TYPE_CHECKING:
    from tests.sim.replicas import SimReplica
    from tests.sim.world import World

TENANT = "dev"
AMOUNTS = (100, 200, 300, 500)
WAITING = frozenset({State.AWAITING_APPROVAL})


def payload(amount: int) -> tools_pb2.ChargeCard:
    return tools_pb2.ChargeCard(customer="cus_1", amount=amount, currency="usd", payment_method="pm_1")


def command(
    run: str,
    step: str,
    tool: str,
    scope: str,
    amount: int,
    call: str,
    *,
    parent: str = "",
    agent: str = "",
    tenant: str = TENANT,
) -> ExecuteCommand:
    message: Message = upstream.payload(amount) if tool == upstream.MESSAGE else payload(amount)
    return ExecuteCommand(
        identity=ActionIdentity(tenant, run, step, tool, scope, parent_run_id=parent, agent=agent, tool_call_id=call),
        payload_type_url=f"type.googleapis.com/{message.DESCRIPTOR.full_name}",
        payload=message.SerializeToString(),
    )


class Workload:
    def __init__(self, world: World) -> None:
        self.world = world
        # The amounts an operator approved, by action id (what the approval was shown).
        self.approved: dict[str, set[int]] = {}
        # The documented refusal each call last met, by tool call id (what the agent does next).
        self.errors: dict[str, GatewayError] = {}
        self.done = False

    async def run(self) -> None:
        w = self.world
        agents = [w.loop.create_task(self.agent(i)) for i in range(w.agents)]
        operator = w.loop.create_task(self.operator())
        await asyncio.gather(*agents)
        await w.acts.finish()
        self.done = True
        await operator

    # -- agents ---------------------------------------------------------------------------------

    async def call(self, rng: random.Random, cmd: ExecuteCommand, budget: float) -> ExecuteResult | None:
        """One Execute on a live replica, as a gRPC call would make it: the handler is cancelled
        when the caller's deadline passes, and a replica that dies never answers."""
        w = self.world
        replica = _pick(rng, w.alive())
        if replica is None:
            await asyncio.sleep(1.0)
            return None
        who = cmd.identity
        tag = f"{who.run_id}/{who.step_id} {who.tool} {who.tool_call_id} on {replica.name}"
        token = CURRENT.set(replica)
        try:
            result = await Caller(replica.running.protocol, replica.running.clock, replica.died).execute(cmd, budget)
        finally:
            CURRENT.reset(token)
        if isinstance(result, ExecuteResult):
            w.event(f"answer {tag}: {result.record.state.value} replayed={result.replayed}")
            if result.record.tenant != who.tenant:  # another tenant's action, told to this one
                w.violation(f"{who.tenant}'s call was answered with {result.record.tenant}'s {result.record.action_id}")
            w.watch.answer(result.record)
            return result
        if isinstance(result, ActionNotFound):  # only another tenant's action under its id
            w.violation(f"{who.tenant}'s call {who.tool_call_id} was refused: its action id is another tenant's")
        if isinstance(result, GatewayError):
            self.errors[who.tool_call_id] = result
        if isinstance(result, GatewayError) or result in ("deadline", "gone"):
            w.event(f"answer {tag}: {result if isinstance(result, str) else type(result).__name__}")
            return None
        w.violation(f"undocumented answer to {tag}: {result!r}")
        return None

    async def agent(self, number: int) -> None:
        w = self.world
        tenant = w.tenants.of_agent(number)
        # Another tenant's agent plays the next agent's script (its run, steps, tools, amounts
        # and scopes, at its times): two tenants' actions that differ by their tenant only.
        mirror = number if tenant == TENANT else (number + 1) % w.agents
        rng = random.Random(f"agent:{w.seed}:{mirror}")
        acting = random.Random(f"agent-acts:{w.seed}:{mirror}")
        calling = random.Random(f"agent-mcp:{w.seed}:{mirror}")  # the MCP upstream's tool (upstream.py)
        run = f"run{mirror}"
        for step in range(w.steps):
            await asyncio.sleep(rng.random() * 5)
            tool = rng.choice(("pay", "pay", "send", "approve", "blind"))
            amount = rng.choice(AMOUNTS)
            scope = f"order:{mirror}.{step}"
            if "once" not in w.knobs.off and acting.random() < 1 / 6:
                tool = "once"  # a business object other runs may act on too (`unique = "scope"`)
                invoice = acting.randrange(3)
                scope = f"invoice:{invoice}"
                amount = AMOUNTS[invoice] if acting.random() < 0.8 else amount
            if w.upstream is not None and calling.random() < upstream.STEP_ODDS and tool != "once":
                tool = upstream.MESSAGE
            for attempt in range(rng.randint(1, 4)):
                if attempt and rng.random() < 0.1:  # the model re-plans the step with another amount
                    amount = rng.choice(AMOUNTS)
                cmd = command(run, f"s{step}", tool, scope, amount, f"call{number}.{step}.{attempt}", tenant=tenant)
                budget = rng.choice((0.3, 2.0, 8.0, 20.0))
                copy = rng.random()
                if copy < 0.2:  # two copies of the call at once (a retry racing the first)
                    results = await asyncio.gather(self.call(rng, cmd, budget), self.call(rng, cmd, budget))
                    result = results[0] or results[1]
                elif copy < 0.3:  # a subagent given the step: its own call id, the same run and step
                    sub = command(
                        run,
                        f"s{step}",
                        tool,
                        scope,
                        amount,
                        f"sub{number}.{step}.{attempt}",
                        parent=run,
                        agent="sub",
                        tenant=tenant,
                    )
                    results = await asyncio.gather(self.call(rng, cmd, budget), self.call(rng, sub, budget))
                    result = results[0] or results[1]
                else:
                    result = await self.call(rng, cmd, budget)
                if result is not None and result.record.state in (State.CONFIRMED, State.REJECTED):
                    break
                await w.acts.after(acting, cmd, result or self.errors.pop(cmd.identity.tool_call_id, None))
                await asyncio.sleep(rng.random() * 15)

    # -- operators ------------------------------------------------------------------------------

    async def operator(self) -> None:
        w = self.world
        rng = random.Random(f"operator:{w.seed}")
        while not self.done:
            await asyncio.sleep(1 + rng.random() * 4)
            replica = _pick(rng, w.alive())
            if replica is None:
                continue
            await w.acts.operate(replica)
            if replica.dead:
                continue
            for record in w.records(State.AWAITING_APPROVAL, State.UNKNOWN):
                if record.state is State.AWAITING_APPROVAL and rng.random() < 0.6:
                    await self._decide(rng, replica, record)
                elif record.state is State.UNKNOWN and rng.random() < 0.2:
                    await self._reconcile(replica, record)
            if not replica.dead:
                await w.tenants.intrude(replica)

    async def _decide(self, rng: random.Random, replica: SimReplica, record: ActionRecord) -> None:
        w = self.world
        action_id, tenant = record.action_id, record.tenant
        seen = tools_pb2.ChargeCard.FromString(record.payload)
        if rng.random() < 0.15:  # the console showed a stale payload
            seen = payload(rng.choice(AMOUNTS))
        ops = replica.running.operations
        if rng.random() < 0.75:
            act = "approve"  # what it was shown, whether or not the answer comes back
            self.approved.setdefault(action_id, set()).add(seen.amount)
            done = ops.approve(tenant, action_id, "ops", "ok", fingerprint=keys.fingerprint(seen))
        else:
            act = "deny"
            done = ops.deny(tenant, action_id, "ops", "no")
        outcome = await w.acts.as_(replica, done)
        w.event(f"operator {act} {action_id[:12]} amount={seen.amount} on {replica.name}: {named(outcome)}")
        if act == "approve":
            await w.reloads.decided(replica, record, seen.amount, outcome)

    async def _reconcile(self, replica: SimReplica, record: ActionRecord) -> None:
        """An operator settles an UNKNOWN from the provider's own ledger (never on a guess), from
        the effects of its current generation (one before a bypass is not this attempt's)."""
        w = self.world
        action_id = record.action_id
        effects = [e for e in of_generation(w.provider.effects_of(action_id), record) if not e.partial]
        if not effects:
            return  # absence is never certain to an operator while a request may still land
        ops = replica.running.operations
        done = ops.reconcile(
            record.tenant, action_id, State.CONFIRMED, "ops", "seen in the ledger", effects[0].external_id
        )
        outcome = await w.acts.as_(replica, done)
        w.event(f"operator reconcile {action_id[:12]} on {replica.name}: {named(outcome)}")


def _pick(rng: random.Random, replicas: list[SimReplica]) -> SimReplica | None:
    return rng.choice(replicas) if replicas else None
