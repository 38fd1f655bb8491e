"""The [[notify]] deliverer in the simulated world (issue 44, "`[[notify]]` sinks and their
failpoints"). In a seed that has it, the config names one webhook sink, so `build_replica` builds
the deliverer as production does (runtime/replica.py: its job among the background jobs, its
lease, cursors and outbox in the shared store), with a sink (built in place of the webhook's)
that delivers into the world's receiver, through the replica's gate (a call there can crash the
replica, before the delivery or after it, or stall it). While the world is faulty the receiver is
down now and then, slow, or takes a notification and loses its answer (so the deliverer retries
what was taken); the replicas may be killed at the deliverer's named failpoints (`before_notify`,
`after_notify`: acts.py).

What docs/notifications.md promises, checked here:

- never a notification for an event that did not happen: each delivered `evt_` id is the chain
  hash of a stored event of that action, with its state and kind;
- at least once, from the store: once settled, every approval event (waiting, decided, expired)
  on the chain was delivered, and the outbox holds nothing pending.

Switched off (`--off notify`), a seed's world is as it was before."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from effectgate.gateway.background import compose
from effectgate.gateway.background.notify.sinks import DeliveryFailed, Sink
from effectgate.gateway.config import NotifySink
from tests.sim.acts import CURRENT
from tests.sim.replicas import Gate

if TYPE_CHECKING:
    from tests.sim.replicas import SimReplica
    from tests.sim.world import World

# A seed's chance to have the deliverer; a delivery's chance (while faulty) to meet the receiver
# down, slow, or taking it and losing the answer.
ODDS, DOWN, SLOW, LOST = 0.5, 0.2, 0.1, 0.05
# The action events every sink is told of (message.kind_of): approvals waiting, decided, expired.
TOLD = "(kind IN ('claim', 'reapprove') AND state = 'AWAITING_APPROVAL') OR kind IN ('approve', 'deny', 'expire')"


class SimSink(Sink):
    """One replica's sink: delivers into the world's receiver through the replica's gate."""

    def __init__(self, config: NotifySink, notices: Notices, replica: SimReplica) -> None:
        super().__init__(config)
        self.notices = notices
        self.replica = replica
        self.gate = Gate(replica, "sink", None)

    async def send(self, event_id: str, note: Mapping[str, Any], body: str) -> None:
        await self.gate.enter("send")
        await self.notices.receive(event_id, note)
        await self.gate.leave("send")


class Notices:
    def __init__(self, world: World) -> None:
        self.world = world
        draw = random.Random(f"notify:{world.seed}")
        self.on = "notify" not in world.knobs.off and draw.random() < ODDS
        self.rng = random.Random(f"notify-sink:{world.seed}")
        self.delivered: Counter[str] = Counter()
        self._original = vars(compose)["build_sinks"]

    def install(self) -> None:
        """Each replica's deliverer, built by `build_replica` from the config's [[notify]], gets a
        sink into the world's receiver instead of the webhook's HTTP client (whose TLS context
        alone costs more than a world)."""
        self._original = vars(compose)["build_sinks"]
        setattr(compose, "build_sinks", self._sinks)  # noqa: B010 - the module's function, for this world

    def uninstall(self) -> None:
        setattr(compose, "build_sinks", self._original)  # noqa: B010

    def _sinks(self, sinks: tuple[NotifySink, ...], source: str) -> dict[str, Sink]:
        replica = CURRENT.get()
        assert replica is not None, "a replica is built as itself (World.start_replica)"
        return {s.name: SimSink(s, self, replica) for s in sinks}

    async def receive(self, event_id: str, note: Mapping[str, Any]) -> None:
        w = self.world
        if w.faulty:
            roll = self.rng.random()
            if roll < DOWN:
                w.counts["notify_sink_down"] += 1
                raise DeliveryFailed("simulated: the receiver is down")
            if roll < DOWN + SLOW:
                w.counts["notify_sink_slow"] += 1
                await asyncio.sleep(self.rng.random() * 8)
        self.delivered[event_id] += 1
        data = note.get("data", {})
        w.counts["notify_delivered"] += 1
        w.event(f"notify {event_id[:16]} {note.get('type')} {str(data.get('action_id', ''))[:12]}")
        self._check(event_id, note)
        if w.faulty and self.rng.random() < LOST:
            w.counts["notify_sink_lost_answer"] += 1
            raise DeliveryFailed("simulated: taken, then the answer was lost")

    def _check(self, event_id: str, note: Mapping[str, Any]) -> None:
        """A notification of an action event names one on the chain, as it is stored."""
        if not event_id.startswith("evt_"):
            return  # a notice (a limit denial, a breaker, forgeries): no event row
        data = note.get("data", {})
        row = self.world.db.conn.execute(
            "SELECT action_id, kind, state FROM action_events WHERE substr(hash, 1, 40) = ?", (event_id[4:],)
        ).fetchone()
        if row is None:
            self.world.violation(f"notification {event_id} ({note.get('type')}) for an event that did not happen")
        elif (row[0], row[1], row[2]) != (data.get("action_id"), data.get("event"), data.get("state")):
            self.world.violation(
                f"notification {event_id} tells {data.get('event')} {data.get('state')}, the event is {row[1]} {row[2]}"
            )

    # -- after settling ---------------------------------------------------------------------------

    def quiet(self) -> bool:
        """Every event staged and every notification taken (or nothing to tell)."""
        if not self.on:
            return True
        conn = self.world.db.conn
        behind = conn.execute(
            "SELECT COUNT(*) FROM event_heads h LEFT JOIN notify_cursors c ON c.tenant = h.tenant"
            " WHERE COALESCE(c.n, 0) < h.n"
        ).fetchone()[0]
        pending = conn.execute("SELECT COUNT(*) FROM notify_outbox WHERE failed = 0").fetchone()[0]
        return not behind and not pending

    def settled(self) -> None:
        w = self.world
        if not self.on:
            return
        if not self.quiet():
            w.violation("notifications still pending after settling")
        told = w.db.conn.execute(
            f"SELECT action_id, kind, hash FROM action_events WHERE n > 0 AND ({TOLD}) ORDER BY seq"
        )
        for action_id, kind, digest in told.fetchall():
            if not self.delivered[f"evt_{digest[:40]}"]:
                w.violation(f"the {kind} of {action_id} (evt_{digest[:40]}) was never notified")
                return
        failed = w.db.conn.execute("SELECT COUNT(*) FROM notify_outbox WHERE failed = 1").fetchone()[0]
        if failed:
            w.violation(f"{failed} notification(s) kept as failed")
