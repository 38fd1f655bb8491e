"""The stateful property test: a Hypothesis RuleBasedStateMachine whose rules are the gateway's
doors, over a real world (tests/model/world.py), with the plain model (tests/model/expect.py)
and the invariants (tests/model/checks.py) checked after every rule.

`ProtocolMachine.store_url` and `.replicas` are set by the test module (SQLite with one gateway,
PostgreSQL with two on one database). Skipped assertions name the owner of the area and the
shrunk example in a comment (docs/testing.md, "The model").
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
import uuid
from collections import Counter
from typing import Any

import grpc
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, MultipleResults, RuleBasedStateMachine, initialize, invariant, multiple, rule

from effectgate.gateway.store import open_store
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.faults import FaultPlan
from tests.model import calls, checks, webhooks
from tests.model import world as w
from tests.model.expect import Answer, Key, Logical, execute_allowed, operator_allowed

TOOLS = ("charge", "charge_approved", "charge_once")
AMOUNTS = (300, 1200, 2500)
FAULTS = ("drop_after_commit", "error_after_commit", "drop_before_commit", "partial", "slow", "conflict")
STEPS = (0.5, 2.5, 7.0, 60.0, 700.0)
VIA = st.integers(0, 1)  # which replica a call goes through (one replica: always the same)


_TEMPLATE: list[str] = []
# The template's directory, one per process: a TemporaryDirectory is removed when the process
# ends (its finalizer runs at exit), which a bare mkdtemp never was.
_TEMPLATE_DIR: list[tempfile.TemporaryDirectory[str]] = []


async def _migrated_sqlite() -> str:
    if not _TEMPLATE:
        _TEMPLATE_DIR.append(tempfile.TemporaryDirectory(prefix="effectgate-model-template-"))
        path = f"{_TEMPLATE_DIR[0].name}/effectgate.db"
        store = open_store(f"sqlite:///{path}")
        await store.open()  # applies the migrations
        await store.close()
        _TEMPLATE.append(path)
    return _TEMPLATE[0]


class ProtocolMachine(RuleBasedStateMachine):
    replicas = 1
    logicals = Bundle("logicals")

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="effectgate-model-")
        self.world = w.World.fresh(self.replicas)
        self.world.store_url = self.world.run(self.make_store())
        self.world.run(self.world.start())
        self.started_at = self.world.clock()
        self.prefix = uuid.uuid4().hex[:8]
        self.counter = itertools.count()
        self.all: list[Logical] = []
        self.seen: set[tuple[str, str]] = set()  # (action id, provider key) of effects seen
        self.granted: Counter[str] = Counter()  # effects past a cap, by run (and "" in total)
        self.last_event: webhooks.Delivered | None = None
        self.answers = 0

    async def make_store(self) -> str:
        """The store's URL: a SQLite file here (a copy of one migrated once per process, as
        migrating a fresh file costs more than a short example); PostgreSQL in a subclass."""
        path = f"{self.folder}/effectgate.db"
        shutil.copyfile(await _migrated_sqlite(), path)
        return f"sqlite:///{path}"

    async def drop_store(self) -> None:
        pass

    def teardown(self) -> None:
        try:
            self.world.close()
        finally:
            asyncio.run(self.drop_store())
            shutil.rmtree(self.folder, ignore_errors=True)

    # -- the model's bookkeeping ----------------------------------------------------------------

    def by_id(self) -> dict[str, list[Logical]]:
        found: dict[str, list[Logical]] = {}
        for logical in self.all:
            if logical.action_id:
                found.setdefault(logical.action_id, []).append(logical)
        return found

    def judge(self, logical: Logical, answer: Answer, *, mismatch: bool = False, bypass: bool = False) -> None:
        """Checks an Execute answer against docs/clients.md and what the model knows, then learns from it."""
        self.answers += 1
        why = execute_allowed(answer, limited=logical.key.tool == "charge", mismatch=mismatch, bypass=bypass)
        assert not why, f"{logical.key}: {why} (got {answer})"
        if answer.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            logical.refused_id = answer.meta("action_id")
        if not answer.ok or answer.action is None:
            return
        action = answer.action
        if logical.action_id and not logical.action_id == action.action_id:
            raise checks.Violation(
                f"{logical.key}: the same run context answered {action.action_id}, not {logical.action_id}"
            )
        logical.action_id = action.action_id
        if action.state == pb.EFFECT_STATE_AWAITING_APPROVAL and logical.key.tool != "charge_approved":
            raise checks.Violation(f"{logical.key}: AWAITING_APPROVAL on a tool without approval")
        settled_before = logical.settled and not bypass and self.bypasses_of(action.action_id) == 0
        if settled_before and action.state != logical.settled:
            raise checks.Violation(
                f"{logical.key}: settled {pb.EffectState.Name(logical.settled)}, "  # type: ignore[arg-type]
                f"then answered {pb.EffectState.Name(action.state)}"
            )
        if action.state in (pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED):
            logical.settled = action.state

    def bypasses_of(self, action_id: str) -> int:
        return sum(logical.bypasses for logical in self.by_id().get(action_id, []))

    def new_key(self, tool: str, run: int) -> Key:
        n = next(self.counter)
        return Key(tool, f"run-{self.prefix}-{run}", f"step-{n}", f"order-{self.prefix}-{n}")

    def execute(
        self, logical: Logical, via: int, *, amount: int | None = None, agent: str = "", bypass: bool = False
    ) -> Answer:
        client = self.world.client("agent", via)
        work = calls.execute(
            client, logical.key, logical.amount if amount is None else amount, logical.card, agent=agent, bypass=bypass
        )
        return self.world.run(work)

    # -- Execute ------------------------------------------------------------------------------

    @initialize(target=logicals, tool=st.sampled_from(TOOLS), amount=st.sampled_from(AMOUNTS))
    def first(self, tool: str, amount: int) -> Logical:
        return self._new(tool, amount, "pm_card_visa", 0, 0)

    @rule(
        target=logicals,
        tool=st.sampled_from(TOOLS),
        amount=st.sampled_from(AMOUNTS),
        card=st.sampled_from(calls.CARDS),
        run=st.integers(0, 1),
        via=VIA,
    )
    def execute_new(self, tool: str, amount: int, card: str, run: int, via: int) -> Logical:
        return self._new(tool, amount, card, run, via)

    def _new(self, tool: str, amount: int, card: str, run: int, via: int) -> Logical:
        logical = Logical(self.new_key(tool, run), amount, card)
        self.all.append(logical)
        self.judge(logical, self.execute(logical, via))
        return logical

    @rule(logical=logicals, via=VIA)
    def replay(self, logical: Logical, via: int) -> None:
        self.judge(logical, self.execute(logical, via))

    @rule(logical=logicals, amount=st.sampled_from(AMOUNTS), via=VIA)
    def replan_with_another_payload(self, logical: Logical, amount: int, via: int) -> None:
        if amount == logical.amount:
            return
        answer = self.execute(logical, via, amount=amount)
        if logical.action_id:  # stored: the other payload is refused, nothing is sent
            self.judge(logical, answer, mismatch=True)
        elif answer.ok:  # never stored (a limit refused it): this is its first payload
            logical.amount = amount
            self.judge(logical, answer)

    @rule(logical=logicals, via=VIA)
    def subagents_on_the_same_step(self, logical: Logical, via: int) -> None:
        async def both() -> list[Answer]:
            return list(
                await asyncio.gather(
                    calls.execute(
                        self.world.client("agent", via), logical.key, logical.amount, logical.card, agent="researcher"
                    ),
                    calls.execute(
                        self.world.client("agent", via + 1), logical.key, logical.amount, logical.card, agent="biller"
                    ),
                )
            )

        answers = self.world.run(both())
        ids = {a.action.action_id for a in answers if a.ok and a.action is not None}
        assert len(ids) <= 1, f"two subagents on one step got two actions: {ids}"
        for answer in answers:
            self.judge(logical, answer)

    @rule(target=logicals, first=logicals, run=st.integers(0, 1), via=VIA)
    def second_step_on_a_unique_scope(self, first: Logical, run: int, via: int) -> Logical:
        n = next(self.counter)
        key = Key("charge_once", f"run-{self.prefix}-{run}", f"step-{n}", first.key.scope)
        logical = Logical(key, first.amount, first.card)
        self.all.append(logical)
        answer = self.execute(logical, via)
        if first.key.tool == "charge_once" and first.action_id:
            # Another logical action on a taken scope: the first one's outcome (on_unique = "coalesce").
            self.judge(logical, answer, mismatch=first.card != logical.card)
            if answer.ok and answer.action is not None and answer.action.action_id != first.action_id:
                raise checks.Violation(
                    f"scope {key.scope}: a second step got {answer.action.action_id}, not {first.action_id}"
                )
        else:
            self.judge(logical, answer)
        return logical

    @rule(logical=logicals, via=VIA)
    def execute_with_bypass(self, logical: Logical, via: int) -> None:
        self.judge(logical, self.execute(logical, via, bypass=True), bypass=True)
        if logical.settled and self.bypasses_of(logical.action_id):
            logical.settled = 0  # a new generation: no longer the outcome it had

    # -- the provider and time ------------------------------------------------------------------

    @rule(kind=st.sampled_from(FAULTS))
    def fault_on_the_next_call(self, kind: str) -> None:
        self.world.sim.injector.configure(FaultPlan(slow_seconds=0.2))
        self.world.sim.injector.script([kind])

    @rule(seconds=st.sampled_from(STEPS))
    def advance_the_clock(self, seconds: float) -> None:
        self.world.clock.advance(seconds)

    @rule()
    def reconciler_pass(self) -> None:
        self.world.run(self.world.reconcile_pass())

    # -- operators -------------------------------------------------------------------------------

    def operator(self, who: str, call: Any) -> Answer:
        answer = self.world.run(calls.answered(call))
        why = operator_allowed(answer)
        assert not why, why
        return answer

    @rule(logical=logicals, who=st.sampled_from(w.OPERATORS), via=VIA)
    def approve(self, logical: Logical, who: str, via: int) -> None:
        if not logical.action_id:
            return
        client = self.world.client(who, via)
        answer = self.operator(who, client.approve(logical.action_id, note=f"ok by {who}"))
        if answer.reason == "APPROVAL_STALE":  # the policy changed while it waited: look again, approve it
            current = self.world.replica(via).gw.config.tools[logical.key.tool].policy_version
            answer = self.operator(who, client.approve(logical.action_id, note=f"ok by {who}", policy_version=current))
        if not answer.ok:
            return
        if (logical.denied or logical.expired) and who not in logical.approvals:
            raise checks.Violation(f"{logical.action_id}: approved after it was denied or expired")
        for same in self.by_id()[logical.action_id]:
            if same.approval_variant != self.world.variant:  # the policy is another digest now
                same.approvals.clear()
                same.approved = False
                same.approval_variant = self.world.variant
            same.approvals.add(who)
            same.approved = same.approved or len(same.approvals) >= w.APPROVALS

    @rule(logical=logicals, who=st.sampled_from(w.OPERATORS), via=VIA)
    def deny(self, logical: Logical, who: str, via: int) -> None:
        if not logical.action_id:
            return
        answer = self.operator(who, self.world.client(who, via).deny(logical.action_id, note=f"no, says {who}"))
        if answer.ok:
            for same in self.by_id()[logical.action_id]:
                same.denied = True

    @rule()
    def let_approvals_expire(self) -> None:
        self.world.clock.advance(max(v["approval_ttl"] for v in w.VARIANTS) + 1)
        self.world.run(self.world.reconcile_pass())

    @rule(logical=logicals, via=VIA)
    def operator_reconciles_honestly(self, logical: Logical, via: int) -> None:
        """The operator looked at the provider's dashboard: the effect of the current key, or none."""
        if not logical.action_id:
            return
        client = self.world.client("op1", via)
        action = self.world.run(calls.answered(client.get(logical.action_id))).action
        if action is None or action.state in (pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED):
            return
        if action.state in (pb.EFFECT_STATE_AWAITING_APPROVAL, pb.EFFECT_STATE_PLANNED):
            return
        held = [
            e
            for e in checks.effects(self.world.ledger())
            if (e.action_id, e.key) == (action.action_id, action.provider_key)
        ]
        if held:
            call = client.reconcile(action.action_id, resolution="CONFIRMED", external_id=held[0].intent, note="seen")
        else:
            call = client.reconcile(action.action_id, resolution="NOT_FOUND", note="not in the dashboard")
        self.operator("op1", call)

    @rule(logical=logicals, via=VIA)
    def grant_bypass(self, logical: Logical, via: int) -> None:
        if not logical.action_id:
            return
        answer = self.operator(
            "op2", self.world.client("op2", via).grant_bypass(logical.action_id, note="a second one")
        )
        if answer.ok:
            logical.bypasses += 1
            self.granted[logical.key.run] += 1

    @rule(logical=logicals, via=VIA)
    def grant_limit(self, logical: Logical, via: int) -> None:
        if not logical.refused_id:
            return
        answer = self.operator("op3", self.world.client("op3", via).grant_limit(logical.refused_id, note="month end"))
        if answer.ok:
            logical.limit_grants += 1
            self.granted[logical.key.run] += 1
        self.judge(logical, self.execute(logical, via))

    # -- webhooks ------------------------------------------------------------------------------

    @rule(logical=logicals, kind=st.sampled_from(webhooks.KINDS), via=VIA)
    def webhook(self, logical: Logical, kind: str, via: int) -> None:
        if logical.action_id:
            self.last_event = webhooks.deliver(self.world, logical, kind, via, self.last_event)

    # -- crashes and reloads -------------------------------------------------------------------

    @rule(target=logicals, tool=st.sampled_from(TOOLS), mid_call=st.booleans())
    def crash_and_restart(self, tool: str, mid_call: bool) -> MultipleResults[Logical]:
        logical = None
        if mid_call and tool != "charge_approved":
            logical = Logical(self.new_key(tool, 0), AMOUNTS[0])
            self.all.append(logical)
            self.world.sim.injector.configure(FaultPlan(slow_seconds=3.0))
            self.world.sim.injector.script(["slow"])
            self.world.run(self._crash_mid_call(logical))
        else:
            self.world.run(self.world.stop(crash=True))
        self.world.run(self.world.start())
        return multiple() if logical is None else multiple(logical)

    async def _crash_mid_call(self, logical: Logical) -> None:
        before = len(self.world.ledger())
        task = asyncio.ensure_future(
            calls.execute(self.world.client("agent"), logical.key, logical.amount, logical.card)
        )
        loop = asyncio.get_running_loop()
        end = loop.time() + 10.0
        while len(self.world.ledger()) == before and not task.done() and loop.time() < end:  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # the simulator's ledger has no event to wait on
        await self.world.stop(crash=True)
        (answer,) = await asyncio.gather(task, return_exceptions=True)
        if isinstance(answer, BaseException):
            return  # the call was cut by the crash (the client closed under it)
        if answer.code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
            self.judge(logical, answer)  # answered before the crash cut it

    @rule()
    def reload_with_another_policy(self) -> None:
        # Approvals bind to the policy's digest, not to a load of it: switching back to the policy
        # they were given under makes them count again (the next approve under another digest
        # starts the count again, see `approve`; a drive re-asks an approved action).
        self.world.run(self.world.stop())
        self.world.variant = 1 - self.world.variant
        self.world.run(self.world.start())

    # -- liveness ----------------------------------------------------------------------------------

    @rule()
    def settle_everything(self) -> None:
        """Past every window and lease, reconciler passes: nothing stored is lost."""
        for step in (w.LEASE_TTL + w.CONSISTENCY_WINDOW + 1, 4000.0, 4000.0):
            self.world.clock.advance(step)
            self.world.run(self.world.reconcile_pass())
            self.world.run(self.world.reconcile_pass())
        checks.nothing_lost(self.world.run(calls.actions(self.world.client("op1"))))

    # -- the invariants ----------------------------------------------------------------------------

    @invariant()
    def the_provider_agrees(self) -> None:
        before = checks.effects(self.world.ledger())
        actions = self.world.run(calls.actions(self.world.client("op1")))
        after = checks.effects(self.world.ledger())
        by_id = self.by_id()
        tools = {a.action_id: a.tool for a in actions.values()}
        runs = {a.action_id: a.context.run_id for a in actions.values()}
        for action in actions.values():  # what the gateway says of denials and expiries
            for logical in by_id.get(action.action_id, []):
                if action.state == pb.EFFECT_STATE_REJECTED and "expired" in action.reason:
                    logical.expired = True
        checks.one_effect_per_action(before, by_id)
        checks.one_effect_per_scope(before, actions)
        checks.outcomes_match_the_provider(actions, before, after)
        new = [e for e in before if (e.action_id, e.key) not in self.seen]
        checks.approvals_before_sends(new, by_id, tools)
        self.seen.update((e.action_id, e.key) for e in before)
        windows = checks.windows_touched(self.started_at, self.world.clock())
        checks.limits_hold(before, tools, runs, self.granted, windows)
