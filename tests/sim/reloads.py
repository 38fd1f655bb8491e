"""A config change in the simulated world (issue 44, "config reloads"). `SIGHUP` re-reads only
the principals, the TLS certificates and the [[notify]] sinks (docs/production.md); a tool's
table (its limits, its approval rule, its retries) changes by restarting the replicas with the new
file. So the world redeploys: at a moment of the run (an operator's approval, once past a drawn
time) the config becomes version 2 (`config.config(version=2)`: the `pay` limits lowered, the
`approve` tool's policy changed, `send` retried less), and each live replica of version 1 is
killed in turn and started again with it, while the others still run the old one. Between two
kills both versions serve the same store.

What is checked, beside every invariant of `checks.py` (nothing lost, nothing doubled across the
kills):

- an effect of the `approve` tool is sent by a replica whose policy is the one the action was
  approved under (an approval given under the old policy never releases a send under the new:
  docs/decisions.md, "The policy");
- once no replica of version 1 is left, the `pay` limits' counters grow only within version 2's
  caps (plus what operators let past them), from where they stood.

An operator whose approval is refused as stale for a policy change approves again naming the
current `policy_version` (the approver looked at it again). Switched off (`--off reload`), a
seed's world is as it was before."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

from effectgate.gateway.model import ActionRecord, PolicyConflict, keys
from effectgate.gateway.store import rows
from effectgate.testing.sim.provider import Effect
from tests.sim import config
from tests.sim.acts import CURRENT, named
from tests.sim.workload import payload

if TYPE_CHECKING:
    from tests.sim.replicas import SimReplica
    from tests.sim.world import World

# A seed's chance to redeploy, and when (virtual seconds after the start) it may.
ODDS, EARLIEST, LATEST = 0.5, 5.0, 60.0
# If no approval comes within this long after the drawn time, the redeploy starts anyway.
PATIENCE = 30.0
LARGEST = 500  # the largest amount an agent asks for (workload.AMOUNTS)


class Reloads:
    def __init__(self, world: World) -> None:
        self.world = world
        self.rng = random.Random(f"reload:{world.seed}")
        on = "reload" not in world.knobs.off and self.rng.random() < ODDS
        self.at: float | None = self.rng.uniform(EARLIEST, LATEST) if on else None
        self.version = 1
        self.versions: dict[str, int] = {}
        self.approved = asyncio.Event()
        # The `pay` counters per tenant (effects, spent) once no replica of version 1 is left.
        self.rolled: dict[str, tuple[int, int]] | None = None

    def started(self, replica: SimReplica) -> None:
        self.versions[replica.name] = self.version

    # -- the redeploy ---------------------------------------------------------------------------

    async def run(self) -> None:
        w = self.world
        if self.at is None:
            return
        await asyncio.sleep(self.at)
        try:
            async with asyncio.timeout(PATIENCE):
                await self.approved.wait()
        except TimeoutError:
            pass
        if not w.faulty:
            return
        self.version = 2
        w.config = config.config(w.config_names, 2, w.notices.on)
        w.counts["reload"] += 1
        w.event("reload: config version 2 (pay limits lowered, approve's policy changed, send retried less)")
        while w.faulty:  # one replica of version 1 after the other (one still starting, once up)
            old = [r for r in w.replicas if not r.dead and self.versions.get(r.name) == 1]
            if not old:
                break
            up = [r for r in old if r.gateway is not None]
            await asyncio.sleep(self.rng.uniform(0.0, 6.0) if up else 1.0)
            if up and w.faulty and not up[0].dead:
                w.counts["reload_restart"] += 1
                up[0].crash("to restart with config version 2")
        if not w.faulty:
            return
        self.rolled = self._counters()
        w.event(f"reload: every replica runs version 2; pay counters {sorted(self.rolled.items())}")

    async def decided(self, replica: SimReplica, record: ActionRecord, amount: int, outcome: object) -> None:
        """After an operator's approval: the redeploy's moment, and a stale one given again."""
        w = self.world
        if self.at is not None and w.loop.time() >= self.at:
            self.approved.set()
        stale = isinstance(outcome, PolicyConflict) and "changed while" in str(outcome)
        if not stale or replica.dead:
            return
        current = replica.running.tools.get(record.tool).policy_version
        fingerprint = keys.fingerprint(payload(amount))
        again = replica.running.operations.approve(
            record.tenant, record.action_id, "ops", "ok", fingerprint=fingerprint, policy_version=current
        )
        answer = await w.acts.as_(replica, again)
        w.counts["reload_reapproved"] += 1
        w.event(
            f"operator approve {record.action_id[:12]} naming policy {current[:8]} on {replica.name}: {named(answer)}"
        )

    # -- the invariants -------------------------------------------------------------------------

    def effect(self, effect: Effect) -> None:
        """An approval tool's effect is sent under the policy its approval was given under."""
        if effect.tool != "approve":
            return
        sender = CURRENT.get()
        if sender is None or sender.gateway is None:
            return
        row = self.world.db.conn.execute(
            f"SELECT {rows.SELECTED} FROM actions WHERE action_id = ?", (effect.action_id,)
        ).fetchone()
        approved = rows.record(row).policy_version if row is not None else ""
        policy = sender.gateway.tools.get("approve").policy_version
        if approved and approved != policy:
            self.world.violation(
                f"effect #{effect.number} of {effect.action_id} sent by {sender.name} under policy {policy[:8]},"
                f" approved under {approved[:8]}"
            )

    def _counters(self) -> dict[str, tuple[int, int]]:
        rows = self.world.db.conn.execute(
            "SELECT tenant, MAX(effects), SUM(CASE WHEN currency = 'usd' THEN spent ELSE 0 END) FROM limit_counters"
            " WHERE tool = 'pay' AND bucket LIKE 'w:%' GROUP BY tenant ORDER BY tenant"
        ).fetchall()
        return {str(tenant): (int(effects), int(spent)) for tenant, effects, spent in rows}

    def settled(self) -> None:
        """Once every replica ran version 2, the counters grew only within its caps."""
        w = self.world
        if self.rolled is None:
            return
        for tenant, (effects, spent) in sorted(self._counters().items()):
            before = self.rolled.get(tenant, (0, 0))
            passes = sum(w.tenants.granted.get(a) == tenant for a in w.acts.limit_grants)
            passes += sum(n for a, n in w.acts.bypasses.items() if w.checks_more._tenant(a) == tenant)
            if (
                effects > max(before[0], config.MAX_EFFECTS_V2) + passes
                or spent > max(before[1], config.BUDGET_V2) + passes * LARGEST
            ):
                w.violation(
                    f"{tenant}'s pay counters grew to {effects} effects, {spent} spent under config version 2"
                    f" (caps {config.MAX_EFFECTS_V2}, {config.BUDGET_V2}; {before} at the roll; {passes} pass(es))"
                )
