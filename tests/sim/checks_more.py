"""The invariants of what `acts.py` adds to the world (issue 44, item 7), beside `checks.py`'s:

- one effect per generation, and no more generations than operators granted bypasses: a second
  effect of an action only after a bypass grant, one per grant;
- one effect per business object: a `unique = "scope"` tool's effects, by (tool, scope);
- the limits never let more through than their caps plus what operators let past them (a limit
  grant or a bypass: one effect each);
- the limits' counters equal the provider's ledger once settled: effects and amounts (checks.py
  compares the effects; here the spend);
- a wait answers "reached" only with an action its condition holds for, and what it answers
  matches the provider (an effect it shows is one the provider applied).

Checked where `checks.py` checks: after every effect, every answer, once settled."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from effectgate.gateway.model import ActionRecord, State, keys
from effectgate.gateway.store import rows
from effectgate.testing.sim.provider import Effect
from tests.sim import config

if TYPE_CHECKING:
    from tests.sim.world import World

# The tools whose action id is the scope's (config.py).
UNIQUE = frozenset({"once"})
LARGEST = 500  # the largest amount an agent asks for (workload.AMOUNTS)


def of_generation(effects: list[Effect], record: ActionRecord) -> list[Effect]:
    """The effects of the record's current generation (a bypass starts a new one)."""
    key = keys.provider_key(record.action_id, record.generation)
    return [e for e in effects if e.provider_key == key]


def current(effect: Effect, record: ActionRecord) -> bool:
    return effect.provider_key == keys.provider_key(record.action_id, record.generation)


class MoreChecks:
    def __init__(self, world: World) -> None:
        self.world = world
        self.scopes: dict[tuple[str, str, str], int] = {}

    def fail(self, what: str) -> None:
        self.world.violation(what)

    def generation(self, action_id: str) -> int:
        """The action's provider-key generation (read only for an action an operator bypassed)."""
        if not self.world.acts.bypasses[action_id]:
            return 0
        found = self.world.db.conn.execute(f"SELECT {rows.SELECTED} FROM actions WHERE action_id = ?", (action_id,))
        return rows.record(found.fetchone()).generation

    # -- after every effect ---------------------------------------------------------------------

    def effect(self, effect: Effect) -> None:
        w = self.world
        ledger = w.provider.ledger
        generations = {e.provider_key for e in ledger if e.action_id == effect.action_id}
        if len(generations) > 1 + w.acts.bypasses[effect.action_id]:
            self.fail(
                f"{len(generations)} generations of effects for {effect.action_id} "
                f"after {w.acts.bypasses[effect.action_id]} bypass grant(s)"
            )
        if effect.tool in UNIQUE:
            self._unique(effect)
        if effect.tool == "pay":
            self._limits(self._tenant(effect.action_id))

    def _unique(self, effect: Effect) -> None:
        w = self.world
        logical = w.watch._logical(effect.action_id)  # the run context stored before the send
        if logical is None:
            self.fail(f"effect #{effect.number} of {effect.action_id}: no such action stored")
            return
        scope = (logical[0], effect.tool, logical[4])  # a business object is its tenant's
        first = self.scopes.setdefault(scope, effect.number)
        if first != effect.number:
            if w.provider.counts["read_lag_beyond_window"]:
                w.counts["duplicate_past_window"] += 1
            else:
                self.fail(
                    f"two effects for one {effect.tool} scope {scope[2]} of {scope[0]}: #{first} and #{effect.number}"
                )

    def _limits(self, tenant: str) -> None:
        """Past its caps only by what operators let through: one effect (of at most the largest
        amount) per limit grant and per bypass grant. Each tenant's caps are its own."""
        w = self.world
        tenants = w.tenants.granted
        spent = [e for e in w.provider.ledger if e.tool == "pay" and self._tenant(e.action_id) == tenant]
        grants = sum(tenants.get(a) == tenant for a in w.acts.limit_grants)
        passes = grants + sum(n for a, n in w.acts.bypasses.items() if self._tenant(a) == tenant)
        total = sum(e.amount for e in spent)
        if len(spent) > config.MAX_EFFECTS + passes or total > config.BUDGET + passes * LARGEST:
            self.fail(f"limit exceeded for {tenant}: {len(spent)} effects, {total} spent, {passes} operator pass(es)")

    def _tenant(self, action_id: str) -> str:
        logical = self.world.watch._logical(action_id)
        return logical[0] if logical is not None else ""

    # -- waits ----------------------------------------------------------------------------------

    def waited(self, record: ActionRecord, reached: bool, until: Callable[[ActionRecord], bool]) -> None:
        if reached and not until(record):
            self.fail(f"a wait on {record.action_id} answered {until.__name__} with it {record.state.value}")
        if not reached and until(record):
            self.fail(f"a wait on {record.action_id} answered not {until.__name__} with it {record.state.value}")
        self.world.watch.answer(record)

    # -- once settled ---------------------------------------------------------------------------

    def settled(self) -> None:
        """The `pay` limit's spend counters equal the amounts the provider's ledger shows, once
        nothing is UNKNOWN (an UNKNOWN action keeps its reservation: counted, maybe not applied)."""
        w = self.world
        unknown = w.db.conn.execute(
            "SELECT COUNT(*) FROM actions WHERE tool = 'pay' AND state = ?", (State.UNKNOWN.value,)
        )
        counted = w.db.conn.execute(
            "SELECT COALESCE(SUM(spent), 0) FROM limit_counters WHERE tool = 'pay' AND currency = 'usd'"
            " AND bucket LIKE 'w:%'"
        ).fetchone()[0]
        applied = sum(e.amount for e in w.provider.ledger if e.tool == "pay")
        if unknown.fetchone()[0]:
            if counted < applied:
                self.fail(f"pay counters show {counted} spent, the provider {applied}")
        elif counted != applied:
            self.fail(f"pay counters show {counted} spent once settled, the provider {applied}")
