"""Webhooks in the simulated world (issue 44, item 4): the provider tells of an effect once it is
visible, signed with the secret of the adapter that made it; the delivery reaches one live
replica's webhook intake (`intake.webhooks.WebhookIntake.handle`, built as `runtime/server.py`
builds it, without the HTTP server around it). Some deliveries come again (replayed), some are
forged (a signature that does not verify), some are another adapter's (an event signed by
adapter X naming an action adapter Y dispatched). What each must be answered is checked here:

- a forged delivery is refused (400 `forged`), whatever it names;
- another adapter's event never settles or notes anything (`unmatched`, or 503 to retry);
- every answer is a documented one (200, 400, 503).

A webhook that settles an action is checked as any other write (checks.py: no `NOT_FOUND` or
`REJECTED` while the provider applied it; a `CONFIRMED` whose receipt is the provider's)."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from effectgate.adapters.base import ActionCall, Observation, Outcome, Receipt
from effectgate.adapters.capabilities import EventKind, ProviderEvent, WebhookRejected
from effectgate.gateway.config import WebhooksSection
from effectgate.gateway.core import ProviderReports
from effectgate.gateway.intake.server import Request, Response
from effectgate.gateway.intake.webhooks import WebhookIntake, adapter_tenants
from effectgate.testing.sim.provider import Effect, ProviderHooks, SimAdapter
from effectgate.testing.sim.store import SimStore
from tests.sim.acts import CURRENT
from tests.sim.caller import Caller

if TYPE_CHECKING:
    from tests.sim.replicas import SimReplica
    from tests.sim.world import World

SIGNATURE = "x-sim-signature"
# An effect's chance to be told by a webhook (while the world is faulty), and each delivery's
# chance to come again, to be forged, to be re-signed by another adapter.
TOLD, REPLAYED, FORGED, FOREIGN = 0.4, 0.3, 0.15, 0.15


def _sign(adapter: str, body: bytes) -> str:
    return hmac.new(f"secret-{adapter}".encode(), body, hashlib.sha256).hexdigest()


class HookedAdapter(SimAdapter):
    """A `SimAdapter` that receives its provider's webhooks (`ReceivesWebhooks`): an event is
    judged by itself (the simulated provider has no read of one object by its id)."""

    name = ""

    def with_hooks(self, hooks: ProviderHooks) -> HookedAdapter:
        made = HookedAdapter(self.provider, self.capabilities, hooks, answer_within=self._answer_within)
        made.name = self.name
        return made

    async def parse_webhook(self, body: bytes, headers: Mapping[str, str]) -> ProviderEvent:
        if not hmac.compare_digest(headers.get(SIGNATURE, ""), _sign(self.name, body)):
            raise WebhookRejected("forged", "the signature does not verify")
        raw = json.loads(body)
        kind = EventKind.SUCCEEDED if raw["type"] == "charge.succeeded" else EventKind.OTHER
        return ProviderEvent(raw["id"], kind, raw["type"], raw["action_id"], raw["object"], raw=raw)

    def observe_event(self, event: ProviderEvent, call: ActionCall) -> Observation:
        raw = event.raw
        if raw["key"] != call.provider_key:  # an earlier generation's effect: not this attempt's
            return Observation(Outcome.UNKNOWN, detail="another generation's event", at=float(raw["at"]))
        receipt = Receipt(raw["object"], raw["request"], {"amount": raw["amount"]}, at=float(raw["at"]))
        return Observation(Outcome.CONFIRMED, detail="webhook", at=float(raw["at"]), receipt=receipt)


def body_of(effect: Effect) -> bytes:
    receipt = effect.receipt()
    return json.dumps(
        {
            "id": f"evt_{effect.number}",
            "type": "charge.succeeded",
            "action_id": effect.action_id,
            "object": effect.external_id,
            "request": receipt.provider_request_id,
            "key": effect.provider_key,
            "amount": effect.amount,
            "at": effect.applied_at,
        },
        sort_keys=True,
    ).encode()


class Webhooks:
    def __init__(self, world: World) -> None:
        self.world = world
        self.rng = random.Random(f"webhooks:{world.seed}")
        self.intakes: dict[str, WebhookIntake] = {}

    def effect(self, effect: Effect) -> None:
        """The provider tells of a (whole) effect once its read would show it."""
        w = self.world
        if not isinstance(w.adapters.get(effect.tool), HookedAdapter):
            return  # the MCP upstream sends none
        if effect.partial or not w.faulty or "webhook" in w.knobs.off or self.rng.random() >= TOLD:
            return
        delay = max(effect.visible_at - w.now(), 0.0) + self.rng.random() * 0.5
        w.loop.call_later(delay, lambda: w.loop.create_task(self.deliver(effect, "valid")))
        roll = self.rng.random()
        if roll < REPLAYED:
            w.loop.call_later(
                delay + 5 + self.rng.random() * 20, lambda: w.loop.create_task(self.deliver(effect, "replayed"))
            )
        elif roll < REPLAYED + FORGED:
            w.loop.call_later(delay, lambda: w.loop.create_task(self.deliver(effect, "forged")))
        elif roll < REPLAYED + FORGED + FOREIGN:
            w.loop.call_later(delay, lambda: w.loop.create_task(self.deliver(effect, "foreign")))

    async def _intake(self, replica: SimReplica) -> WebhookIntake:
        """The replica's intake, as `runtime/server.py` builds it, on the shared store through the
        replica's gate (its calls can crash it, its statements meet the store's faults)."""
        intake = self.intakes.get(replica.name)
        if intake is None:
            parts = replica.running
            from tests.sim.replicas import Gate  # replicas imports config, which imports this module

            store = SimStore(self.world.db, Gate(replica, "store", self.world.store_faults))
            await store.open()
            reports = ProviderReports(parts.protocol, store, parts.tools, adapter_tenants(self.world.config))
            adapters = {t.config.adapter: t.adapter for t in parts.bound.values()}
            intake = self.intakes[replica.name] = WebhookIntake(
                reports, adapters, self.world.config.webhooks or WebhooksSection()
            )
        return intake

    async def deliver(self, effect: Effect, how: str) -> None:
        w = self.world
        alive = w.alive()
        if not w.faulty or not alive:
            return  # the settling phase: the provider has stopped telling
        replica = self.rng.choice(alive)
        body = body_of(effect)
        route = effect.tool
        if how == "foreign":  # another adapter signs an event about this action
            route = self.rng.choice(
                sorted(t for t, a in w.adapters.items() if t != effect.tool and isinstance(a, HookedAdapter))
            )
        headers = {"content-type": "application/json", SIGNATURE: _sign(route, body)}
        if how == "forged":  # the body changed after it was signed
            body = body.replace(b'"charge.succeeded"', b'"charge.succeeded" ')
        request = Request("POST", f"/webhooks/{route}", headers, body)
        token = CURRENT.set(replica)
        try:
            intake = await self._intake(replica)
            answer = await Caller.operate(intake.handle(request), replica.died)
        finally:
            CURRENT.reset(token)
        w.counts[f"webhook_{how}"] += 1
        outcome = answer.body.get("outcome", answer.body.get("error")) if isinstance(answer, Response) else answer
        w.event(
            f"webhook {how} evt_{effect.number} {effect.action_id[:12]} via {route} on {replica.name}:"
            f" {_named(answer)} {outcome}"
        )
        if isinstance(answer, Response):
            self.check(how, answer)
        elif answer != "gone":
            w.violation(f"undocumented answer to a {how} webhook about {effect.action_id}: {answer!r}")

    def check(self, how: str, answer: Response) -> None:
        w = self.world
        outcome = answer.body.get("outcome", answer.body.get("error"))
        if answer.status not in (200, 400, 503):
            w.violation(f"a {how} webhook answered {answer.status} {answer.body}")
        elif how == "forged" and (answer.status, outcome) != (400, "forged"):
            w.violation(f"a forged webhook answered {answer.status} {outcome}")
        elif how == "foreign" and answer.status == 200 and outcome != "unmatched":
            w.violation(
                f"another adapter's webhook answered {outcome}, not unmatched: it reached an action it did not dispatch"
            )
        elif how == "foreign" and answer.status == 400:
            w.violation(f"another adapter's webhook answered 400 {outcome}")


def _named(answer: Any) -> str:
    if isinstance(answer, Response):
        return str(answer.status)
    return type(answer).__name__ if isinstance(answer, BaseException) else str(answer)
