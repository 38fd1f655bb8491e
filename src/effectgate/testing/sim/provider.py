"""A simulated provider and the adapter that calls it, for deterministic simulation.

`SimProvider` is the world outside the gateway: it keeps its own ledger of every effect it
applied (the ground truth a simulator checks the gateway's answers against). A request is applied
`d` seconds after it was sent, with `d` drawn within the tool's `keeps_processing` and
independent of the caller: a caller that gives up leaves a write that lands later. Its answers
may be lost after the effect was applied, be a 5xx after applying, a 5xx, 409 (key in use) or
429 with nothing applied, or a definitive refusal; an effect may be partial (half applied: never
confirmed by a read). Its read API shows an effect only after a read lag within the declared
consistency window (or, in the separately counted `beyond_window` mode, past it: the documented
limit of any read-back).

`SimAdapter` is one tool's adapter on it: with or without idempotency keys, with or without a
read API. Every call goes through `ProviderHooks` first (a simulator crashes a replica there, or
refuses a dead one's calls) and every draw comes from one seeded `random.Random`.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from google.protobuf.message import Message

from effectgate.adapters.base import (
    ActionCall,
    Adapter,
    AmbiguousError,
    Capabilities,
    DefinitiveError,
    Observation,
    Outcome,
    RateLimited,
    Receipt,
)
from effectgate.tools.v1 import tools_pb2


@dataclass
class Effect:
    """One effect the provider applied: its ledger row."""

    number: int
    tool: str
    action_id: str
    provider_key: str
    amount: int
    applied_at: float
    visible_at: float
    partial: bool = False
    # The gateway's attempt whose request applied it (`ActionCall.attempt`).
    attempt: int = 0

    @property
    def external_id(self) -> str:
        return f"ext_{self.number}"

    def receipt(self) -> Receipt:
        return Receipt(self.external_id, f"req_{self.number}", {"amount": self.amount}, at=self.applied_at)


@dataclass
class ProviderOdds:
    """How often each answer happens (the rest: applied and answered)."""

    lost: float = 0.08  # applied, the answer lost
    error_after: float = 0.05  # applied, then a 5xx
    error_before: float = 0.05  # a 5xx, nothing applied
    key_in_use: float = 0.03  # 409 while a request with the same key is in flight
    rate_limited: float = 0.04  # 429, nothing applied
    declined: float = 0.04  # a definitive refusal, nothing applied
    partial: float = 0.02  # half applied, the answer lost
    slow: float = 0.2  # applied late: d up to keeps_processing (a timeout leaves a late write)
    verify_error: float = 0.05  # the read API fails
    beyond_window: float = 0.0  # read lag past the declared window (the documented limit)


class ProviderHooks(Protocol):
    async def enter(self, kind: str) -> None:
        """Before a request leaves ("execute" or "verify"); raising or never returning stops it."""

    async def leave(self, kind: str) -> None:
        """After the answer came back, before the caller sees it."""


class Hookable(Protocol):
    """An adapter a simulator gives each replica a copy of, its calls through the replica's hooks."""

    def with_hooks(self, hooks: ProviderHooks) -> Adapter: ...


class _Open:
    async def enter(self, kind: str) -> None:
        pass

    async def leave(self, kind: str) -> None:
        pass


@dataclass
class SimProvider:
    """The provider's side: the ledger, the requests in flight, the faults drawn."""

    rng: random.Random
    now: Callable[[], float]
    odds: ProviderOdds = field(default_factory=ProviderOdds)
    ledger: list[Effect] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    # Requests still being processed, by key and then by the gateway's attempt (a second request
    # with a key in flight gets 409 or waits).
    _busy: defaultdict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    _busy_actions: Counter[str] = field(default_factory=Counter)
    # Dedup memory: key -> the effect it applied.
    _by_key: dict[str, Effect] = field(default_factory=dict)
    # Told of every new effect (a simulator checks its invariants there).
    on_effect: Callable[[Effect], None] | None = None
    # Told of every request as it arrives and how it will go (a simulator's trace).
    on_request: Callable[[str], None] | None = None

    def note(self, what: str) -> None:
        if self.on_request is not None:
            self.on_request(what)

    def pending(self, provider_key: str) -> bool:
        """Whether a request with this key is still being processed (it may still apply)."""
        return any(n > 0 for n in self._busy[provider_key].values())

    def pending_up_to(self, provider_key: str, attempt: int) -> bool:
        """Whether a request with this key from one of the attempts up to `attempt` may still apply."""
        return any(n > 0 for sent, n in self._busy[provider_key].items() if sent <= attempt)

    def pending_for(self, action_id: str) -> bool:
        """Whether a request for this action is still being processed (it may still apply)."""
        return self._busy_actions[action_id] > 0

    def pending_actions(self) -> list[str]:
        """The actions with a request still being processed."""
        return [a for a, n in self._busy_actions.items() if n > 0]

    def quiet(self) -> None:
        """No more faults: every request applied and answered, reads within the window."""
        self.odds = ProviderOdds(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

    def effects_of(self, action_id: str) -> list[Effect]:
        return [e for e in self.ledger if e.action_id == action_id]

    async def applied_after(
        self, call: ActionCall, delay: float, *, amount: int, lag: float, dedups: bool, partial: bool, slow: bool
    ) -> Effect:
        """The effect of `call`, applied `delay` seconds from now whatever happens to the caller
        (a caller that gave up leaves a write that lands later): busy for its key and action
        until then."""
        applied: asyncio.Future[Effect] = asyncio.get_running_loop().create_future()
        self._busy[call.provider_key][call.attempt] += 1
        self._busy_actions[call.action_id] += 1

        def apply() -> None:
            self._busy[call.provider_key][call.attempt] -= 1
            self._busy_actions[call.action_id] -= 1
            applied.set_result(self._apply(call, amount, lag, dedups, partial))

        asyncio.get_running_loop().call_later(delay, apply)
        if slow:
            self.counts["provider_late_write"] += 1
        if partial:
            self.counts["provider_partial"] += 1
        return await asyncio.shield(applied)

    def _apply(self, call: ActionCall, amount: int, lag: float, dedups: bool, partial: bool) -> Effect:
        if dedups and call.provider_key in self._by_key:
            return self._by_key[call.provider_key]
        now = self.now()
        effect = Effect(
            len(self.ledger) + 1,
            call.tool,
            call.action_id,
            call.provider_key,
            amount,
            applied_at=now,
            visible_at=now + lag,
            partial=partial,
            attempt=call.attempt,
        )
        self.ledger.append(effect)
        if dedups:
            self._by_key[call.provider_key] = effect
        if self.on_effect is not None:
            self.on_effect(effect)
        return effect


class SimAdapter(Adapter):
    """One tool's adapter on a `SimProvider` (payload: `ChargeCard`; its amount is the effect's)."""

    payload_type: ClassVar[type[Message]] = tools_pb2.ChargeCard

    def __init__(
        self,
        provider: SimProvider,
        capabilities: Capabilities,
        hooks: ProviderHooks | None = None,
        *,
        answer_within: float = 2.0,
    ) -> None:
        self.provider = provider
        self._capabilities = capabilities
        self.hooks: ProviderHooks = hooks or _Open()
        # How long a normal answer takes at most (a slow one: up to keeps_processing).
        self._answer_within = answer_within

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> Adapter:
        raise NotImplementedError("a SimAdapter is built by the simulator, not from a config")

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def with_hooks(self, hooks: ProviderHooks) -> SimAdapter:
        """The same tool on the same provider, its calls through `hooks` (one replica's view)."""
        return SimAdapter(self.provider, self._capabilities, hooks, answer_within=self._answer_within)

    def _lag(self) -> float:
        window = self._capabilities.consistency_window
        p = self.provider
        if p.odds.beyond_window and p.rng.random() < p.odds.beyond_window:
            p.counts["read_lag_beyond_window"] += 1
            return window * (1.0 + p.rng.random()) + 0.1
        return window * p.rng.random()

    async def execute(self, call: ActionCall) -> Receipt:
        await self.hooks.enter("execute")
        p, odds, caps = self.provider, self.provider.odds, self._capabilities
        amount = int(getattr(call.payload, "amount", 0))
        dedups = caps.dedups_on_key
        roll = p.rng.random()
        lag = self._lag()
        fast = p.rng.random() * self._answer_within
        slow = p.rng.random() < odds.slow
        delay = p.rng.random() * caps.keeps_processing if slow else fast
        if dedups and p.pending(call.provider_key):  # the same key in flight: 409, as Stripe answers
            p.counts["provider_409"] += 1
            await asyncio.sleep(fast)
            await self.hooks.leave("execute")
            raise AmbiguousError("409: a request with this key is in flight", code="key_in_use")
        if dedups and call.provider_key in p._by_key:  # a key it has seen: the first answer again
            roll = max(roll, odds.rate_limited + odds.declined + odds.error_before)
        for kind, chance in (("rate_limited", odds.rate_limited), ("declined", odds.declined)):
            if roll < chance:
                p.counts[f"provider_{kind}"] += 1
                await asyncio.sleep(fast)
                await self.hooks.leave("execute")
                if kind == "declined":
                    raise DefinitiveError("card declined", code="card_declined")
                raise RateLimited("429", retry_after=p.rng.random() * 2)
            roll -= chance
        if roll < odds.error_before:
            p.counts["provider_5xx_before"] += 1
            await asyncio.sleep(fast)
            await self.hooks.leave("execute")
            raise AmbiguousError("503 from the provider", code="unavailable")
        roll -= odds.error_before
        # From here the request is applied at send + delay, whatever happens to the caller.
        p.note(f"request {call.tool} {call.action_id[:12]} key={call.provider_key[-8:]} applies in {delay:.3f}s")
        partial = roll < odds.partial
        effect = await p.applied_after(call, delay, amount=amount, lag=lag, dedups=dedups, partial=partial, slow=slow)
        await self.hooks.leave("execute")
        roll -= odds.partial
        if partial or effect.partial or roll < odds.lost:
            p.counts["provider_lost_answer"] += 0 if partial else 1
            raise AmbiguousError("connection reset after the request was sent", code="reset")
        roll -= odds.lost
        if roll < odds.error_after:
            p.counts["provider_5xx_after"] += 1
            raise AmbiguousError("502 after the request was applied", code="bad_gateway")
        return effect.receipt()

    async def verify(self, call: ActionCall) -> Observation:
        await self.hooks.enter("verify")
        p = self.provider
        await asyncio.sleep(p.rng.random() * 0.2)
        await self.hooks.leave("verify")
        now = p.now()
        if not self._capabilities.has_read_api:
            return Observation(Outcome.UNKNOWN, detail="no read API", at=now)
        if p.rng.random() < p.odds.verify_error:
            p.counts["provider_verify_error"] += 1
            return Observation(Outcome.UNKNOWN, detail="read API failed", at=now)
        seen = [e for e in p.ledger if e.provider_key == call.provider_key and e.visible_at <= now]
        if not seen:
            return Observation(Outcome.NOT_FOUND, detail="no effect with this key", at=now)
        effect = seen[0]
        if effect.partial:
            evidence = {"external_id": effect.external_id}
            return Observation(Outcome.UNKNOWN, detail="half applied", evidence=evidence, at=now)
        return Observation(Outcome.CONFIRMED, detail="found", at=now, receipt=effect.receipt())
