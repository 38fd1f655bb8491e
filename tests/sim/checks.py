"""The invariants, checked against the provider's ledger (the only count of effects) after every
event: every new effect, every committed store write, every answer, and once more after the final
settling phase. A violation is recorded in the world (and its trace), never raised, so one run
reports every promise it saw broken."""

from __future__ import annotations

from typing import TYPE_CHECKING

from effectgate.gateway.model import ActionRecord, State, keys
from effectgate.gateway.store import rows, verify_chain
from effectgate.testing.sim.provider import Effect
from effectgate.testing.sim.store import SimStore
from tests.sim import config
from tests.sim.checks_more import current, of_generation

if TYPE_CHECKING:
    from tests.sim.world import World

SETTLED = frozenset({State.CONFIRMED, State.REJECTED})
NO_EFFECT = frozenset({State.REJECTED, State.NOT_FOUND})
# Where a lost answer may honestly stay UNKNOWN for good: no read API.
BLIND = frozenset(name for name, (_, readable, _, _) in config.TOOLS.items() if not readable)


class Watch:
    def __init__(self, world: World) -> None:
        self.world = world
        self.fences: dict[str, int] = {}
        self.states: dict[str, str] = {}
        self.identities: dict[str, tuple[str, str, str, str, str]] = {}

    def fail(self, what: str) -> None:
        self.world.violation(what)

    # -- after every effect ---------------------------------------------------------------------

    def effect(self, effect: Effect) -> None:
        w = self.world
        ledger = w.provider.ledger
        same = [e for e in ledger if e.provider_key == effect.provider_key]  # one generation's
        if len(same) > 1:
            if w.provider.counts["read_lag_beyond_window"]:
                w.counts["duplicate_past_window"] += 1  # the documented limit, counted apart
            else:
                self.fail(f"two effects for one action {effect.action_id}: #{same[0].number} and #{effect.number}")
        # One effect per logical action, whatever key the gateway derived: the run context's
        # (tenant, run, step, tool, scope) of every applied action, a subagent's calls included.
        logical = self._logical(effect.action_id)
        twins = [e for e in ledger if e.action_id != effect.action_id and self._logical(e.action_id) == logical]
        if twins:
            if w.provider.counts["read_lag_beyond_window"]:
                w.counts["duplicate_past_window"] += 1
            else:
                self.fail(f"two effects for one logical action {logical}: #{twins[0].number} and #{effect.number}")
        if effect.tool == "approve":
            shown = w.workload.approved.get(effect.action_id, set())
            if effect.amount not in shown:
                self.fail(f"sent without an approval of its payload: {effect.action_id} amount {effect.amount}")
        state = self.states.get(effect.action_id)
        if state in (State.REJECTED.value, State.NOT_FOUND.value) and not self._may_resend(effect.action_id):
            self.fail(f"an effect for {effect.action_id} after it was recorded {state}")

    def _logical(self, action_id: str) -> tuple[str, str, str, str, str] | None:
        """The run context an action was stored for (stored before its request was sent)."""
        if action_id not in self.identities:
            found = self.world.db.conn.execute(
                f"SELECT {rows.SELECTED} FROM actions WHERE action_id = ?", (action_id,)
            ).fetchall()
            if not found:
                return None
            who = rows.record(found[0])
            self.identities[action_id] = (who.tenant, who.run_id, who.step_id, who.tool, who.scope)
        return self.identities[action_id]

    def _may_resend(self, action_id: str) -> bool:
        return self.states.get(action_id) == State.NOT_FOUND.value

    # -- after every committed write ------------------------------------------------------------

    def store(self) -> None:
        w = self.world
        # Only the rows written since the last look (the store's feed of written rows).
        changed = [
            (action_id, state, fence)
            for action_id, (state, fence) in w.db.written().items()
            if (self.states.get(action_id), self.fences.get(action_id)) != (state, fence)
        ]
        if not changed:
            return
        for action_id, state, fence in sorted(changed):
            w.event(f"row {action_id[:12]} {state} fence={fence}")
            before = self.fences.get(action_id, 0)
            if fence < before:
                self.fail(f"fence of {action_id} went back from {before} to {fence}")
            self.fences[action_id] = fence
            was = self.states.get(action_id)
            bypass = state == State.PLANNED.value and w.acts.bypasses[action_id] > 0  # a new generation
            if was in (State.CONFIRMED.value, State.REJECTED.value) and state != was and not bypass:
                self.fail(f"{action_id} left its terminal state {was} for {state}")
            self.states[action_id] = state
            if state in (State.REJECTED.value, State.NOT_FOUND.value):
                key = keys.provider_key(action_id, w.checks_more.generation(action_id))
                if any(e.provider_key == key for e in w.provider.ledger):
                    self.fail(f"{action_id} recorded {state} while the provider applied it")
                elif w.provider.pending(key):  # this generation's (one before a bypass is not)
                    self.fail(f"{action_id} recorded {state} while a request for it may still apply")

    # -- answers --------------------------------------------------------------------------------

    def answer(self, record: ActionRecord) -> None:
        w = self.world
        effects = of_generation(w.provider.effects_of(record.action_id), record)
        if record.state is State.CONFIRMED:
            ids = {e.external_id for e in effects if not e.partial}
            if record.receipt is None or record.receipt.external_id not in ids:
                got = record.receipt.external_id if record.receipt else "no receipt"
                self.fail(f"answered CONFIRMED for {record.action_id} ({got}) without that effect at the provider")
        elif record.state in NO_EFFECT:
            # True of the attempts sent before it was written. A NOT_FOUND may be sent again at
            # once by another worker (that is what it allows), so by the time it is answered a
            # later attempt may be under way: the caller's next Execute joins that one.
            sent = [e for e in effects if e.attempt <= record.attempts]
            key = keys.provider_key(record.action_id, record.generation)
            if sent or w.provider.pending_up_to(key, record.attempts):
                self.fail(f"answered {record.state.value} for {record.action_id} while the provider has its effect")

    # -- after the settling phase ---------------------------------------------------------------

    def quiet(self) -> bool:
        """Nothing left to happen: no request in flight at the provider, no action that the
        gateway still has to settle (a NOT_FOUND waits for its agent; an UNKNOWN that no read can
        settle stays)."""
        w = self.world
        if any(w.provider.pending_for(e) for e in w.provider.pending_actions()):
            return False
        for record in w.records(State.DISPATCHED, State.PLANNED, State.AWAITING_APPROVAL, State.UNKNOWN):
            if record.state is not State.UNKNOWN:
                return False
            if record.tool not in BLIND and not any(e.partial for e in w.provider.effects_of(record.action_id)):
                return False
        return True

    def settled(self) -> None:
        w = self.world
        records = {r.action_id: r for r in w.records()}
        for record in records.values():
            effects = of_generation(w.provider.effects_of(record.action_id), record)
            partial = any(e.partial for e in effects)
            if record.state in (State.DISPATCHED, State.PLANNED, State.AWAITING_APPROVAL):
                self.fail(f"{record.action_id} ({record.tool}) still {record.state.value} after settling")
            elif record.state is State.UNKNOWN and record.tool not in BLIND and not partial:
                self.fail(f"{record.action_id} ({record.tool}) still UNKNOWN after settling: {record.reason}")
            self.answer(record)
        for effect in w.provider.ledger:
            stored = records.get(effect.action_id)
            if stored is not None and not current(effect, stored):
                continue  # a generation before a bypass: the action's state is the new one's
            if stored is None or stored.state not in (State.CONFIRMED, State.UNKNOWN):
                state = "missing" if stored is None else stored.state.value
                self.fail(f"effect #{effect.number} of {effect.action_id} is {state} in the store")
        self._counters(records)

    async def chain(self, store: SimStore) -> None:
        """The audit chain of every tenant verifies, and every event is on it."""
        await store.open()
        verdict = await verify_chain(store)
        if verdict.broken is not None:
            self.fail(f"the audit chain is broken: {verdict.broken}")
        if verdict.unchained:
            self.fail(f"{verdict.unchained} event(s) are not on the audit chain")
        self.world.event(f"chain {verdict.tenants} tenant(s) {verdict.rows} row(s)")

    def _counters(self, records: dict[str, ActionRecord]) -> None:
        """The `pay` limit's counters equal the ledger once nothing is UNKNOWN (an UNKNOWN action
        keeps its reservation: counted, maybe not applied)."""
        w = self.world
        rows = w.db.conn.execute(
            "SELECT bucket, MAX(effects) FROM limit_counters WHERE tool = 'pay' AND bucket LIKE 'w:%'"
            " GROUP BY tenant, bucket"
        ).fetchall()
        effects = [e for e in w.provider.ledger if e.tool == "pay"]
        unknown = [r for r in records.values() if r.tool == "pay" and r.state is State.UNKNOWN]
        counted = sum(int(r[1]) for r in rows)
        if unknown:
            if counted < len(effects):
                self.fail(f"pay counters show {counted} effects, the provider {len(effects)}")
        elif counted != len(effects):
            self.fail(f"pay counters show {counted} effects once settled, the provider {len(effects)}")
