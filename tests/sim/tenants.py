"""A second tenant in the simulated world (issue 44, "another tenant's object"): some agents act
for tenant `acme` beside `dev`'s, on the same runs, steps, tools and scopes (so two tenants' run
contexts differ only by their tenant), and an operator of one tenant now and then names the other
tenant's action: reads it, waits on it, approves, denies, reconciles, grants it a bypass or a
limit, lists its own tenant's actions. What each must be answered is checked here:

- every act naming another tenant's stored action is refused as not found (the action's very
  existence is not told), or meets a documented outage; it never changes the action;
- a list of one tenant's actions shows only that tenant's;
- once settled, no event of any action was written by the other tenant's operator, and a limit
  grant an operator gave their own tenant's refused call was not taken over by the other tenant.

Each tenant's limits are its own: `checks_more.py` counts the caps per tenant, `checks.py` keys
the logical action and the business object by tenant too. Draws come from their own streams:
switched off (`--off tenant`), a seed's world is as it was before."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from effectgate.gateway.core.operators.waits import settled
from effectgate.gateway.model import ActionNotFound, GatewayUnavailable, ListQuery, State
from effectgate.gateway.model.limits import LimitGrant
from tests.sim.acts import CURRENT, named
from tests.sim.caller import Caller

if TYPE_CHECKING:
    from tests.sim.replicas import SimReplica
    from tests.sim.world import World

TENANTS = ("dev", "acme")
# An agent's chance to act for the second tenant; an operator's look's chance to intrude.
OTHER_AGENT, INTRUDE = 0.35, 0.25
INTRUDER = "intruder"  # the principal of an operator naming another tenant's action
ACTS = ("get", "wait", "approve", "deny", "reconcile", "bypass", "grant_limit", "list")
# What an act naming another tenant's action may be answered: not found, or an outage.
REFUSED = (ActionNotFound, GatewayUnavailable)


def other(tenant: str) -> str:
    return TENANTS[1] if tenant == TENANTS[0] else TENANTS[0]


class Tenants:
    def __init__(self, world: World) -> None:
        self.world = world
        self.on = "tenant" not in world.knobs.off
        self.rng = random.Random(f"tenants:{world.seed}")
        # Refused calls' action ids, by tenant (a limit refusal stores nothing: the id is all).
        self.refused: list[tuple[str, str]] = []
        # Limit grants an operator gave their own tenant's refused call: action id -> tenant (as
        # asked; and answered, so surely committed).
        self.granted: dict[str, str] = {}
        self.confirmed: dict[str, str] = {}

    def of_agent(self, number: int) -> str:
        """The tenant agent `number` acts for (its own stream: the agent's draws do not move)."""
        if not self.on:
            return TENANTS[0]
        return TENANTS[1] if random.Random(f"tenant:{self.world.seed}:{number}").random() < OTHER_AGENT else TENANTS[0]

    # -- an operator naming another tenant's action ----------------------------------------------

    async def intrude(self, replica: SimReplica) -> None:
        w = self.world
        if not self.on or self.rng.random() >= INTRUDE:
            return
        act = self.rng.choice(ACTS)
        if act == "grant_limit":
            if not self.refused:
                return
            owner, action_id = self.rng.choice(self.refused)
        else:
            # (tenant, action id) of every stored action in action id order, as `w.records()`
            # would name them, without decoding every body (the columns are the record's own).
            found = w.db.conn.execute("SELECT tenant, action_id FROM actions ORDER BY action_id").fetchall()
            if not found:
                return
            owner, action_id = self.rng.choice(found)  # a sqlite3 row: a tuple
        tenant = other(owner)
        parts = replica.running
        ops = parts.operations
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "get": lambda: parts.protocol.get(tenant, action_id),
            "wait": lambda: parts.waits.wait(tenant, action_id, settled, 1.0),
            "approve": lambda: ops.approve(tenant, action_id, INTRUDER, "mine"),
            "deny": lambda: ops.deny(tenant, action_id, INTRUDER, "mine"),
            "reconcile": lambda: ops.reconcile(tenant, action_id, State.REJECTED, INTRUDER, "mine", ""),
            "bypass": lambda: ops.grant_bypass(tenant, action_id, INTRUDER, "mine"),
            "grant_limit": lambda: parts.desk.grant(tenant, action_id, INTRUDER, "mine"),
            "list": lambda: parts.protocol.list(ListQuery(tenant=tenant, page_size=200)),
        }
        # Whether the action was stored before the act (a refused call's id may be claimed while
        # the grant is on its way: then there was nothing to refuse).
        stored = w.db.conn.execute("SELECT 1 FROM actions WHERE action_id = ?", (action_id,)).fetchone() is not None
        token = CURRENT.set(replica)
        try:
            outcome = await Caller.operate(calls[act](), replica.died, timeout=30.0)
        finally:
            CURRENT.reset(token)
        w.counts[f"tenant_{act}"] += 1
        w.event(f"operator of {tenant} {act} {owner}'s {action_id[:12]} on {replica.name}: {named(outcome, None)}")
        self._check(act, tenant, owner, action_id, outcome, stored)

    def _check(self, act: str, tenant: str, owner: str, action_id: str, outcome: object, stored: bool) -> None:
        w = self.world
        if outcome in ("gone", "deadline") or isinstance(outcome, REFUSED):
            return
        if act == "list":
            leaked = [r.action_id for r in getattr(outcome, "records", []) if r.tenant != tenant]
            if leaked:
                w.violation(f"a list of {tenant}'s actions shows another tenant's: {leaked[0]}")
            elif isinstance(outcome, BaseException):
                w.violation(f"undocumented answer to {tenant}'s list: {outcome!r}")
            return
        if act == "grant_limit" and isinstance(outcome, LimitGrant) and not stored:
            return  # a refused call stores nothing: the id named no action of anybody's yet
        got = named(outcome, None)
        w.violation(f"the operator of {tenant} named {owner}'s action {action_id} ({act}) and got {got}")

    # -- once settled ---------------------------------------------------------------------------

    def settled(self) -> None:
        w = self.world
        if not self.on:
            return
        written = w.db.conn.execute(
            "SELECT action_id, kind FROM action_events WHERE principal = ? ORDER BY seq", (INTRUDER,)
        ).fetchone()
        if written is not None:
            w.violation(f"another tenant's operator changed {written[0]} ({written[1]})")
        for action_id, tenant in sorted(self.confirmed.items()):
            row = w.db.conn.execute(
                "SELECT principal FROM limit_grants WHERE action_id = ? AND tenant = ?", (action_id, tenant)
            ).fetchone()
            if row is None or row[0] != "ops":
                w.violation(f"{tenant}'s limit grant for {action_id} was taken over ({row[0] if row else 'gone'})")
