"""What the conformance suite's checks share: the target protocol and the assertions.

`effectgate.adapters.testing` is the suite (its `CHECKS`); this module is the vocabulary its
checks are written in, so a check module stays one claim per function.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Protocol

from google.protobuf.message import Message

from effectgate.adapters.base import ActionCall, Adapter, AdapterError, Observation, Outcome, Receipt


class ConformanceTarget(Protocol):
    """How to drive one adapter against its running provider simulator."""

    # Name shown in test ids.
    name: str
    # The provider secret the simulator accepts; it must never show in adapter output.
    canary: str
    # How long a `delayed_visibility` write stays unreadable (seconds).
    visibility_lag: float
    # True only when the provider's success reply cannot reveal a partial effect (SMTP's 250).
    partial_hidden_in_reply: bool
    # How long the simulator's `slow` fault holds a write's answer (seconds): a provider that
    # answers that late may still be applying a request that long after the caller hung up.
    slow_seconds: float
    # The pause the simulator's `rate_limit` fault names (its `Retry-After`, seconds), or None
    # when the protocol has no way to name one (SMTP's 451).
    retry_after: float | None

    async def build(self, secret: str | None = None, *, timeout: float | None = None) -> Adapter:
        """The adapter wired to the simulator, holding `secret` (default: the canary), with its
        attempt timeout set to `timeout` seconds (default: the target's own)."""
        ...

    def good_payload(self, tag: str) -> Message:
        """A payload the provider accepts; `tag` is unique per call (use it in ids)."""
        ...

    def refused_payload(self, tag: str) -> Message:
        """A payload the provider refuses definitively (validation, declined card)."""
        ...

    def inject(self, *faults: str | None) -> None:
        """Scripts the faults of the next fresh writes (None = no fault)."""
        ...

    async def effects(self) -> int:
        """Effects the provider has recorded so far (its ledger, duplicates included)."""
        ...


def new_call(adapter: Adapter, payload: Message, *, tool: str = "conformance") -> ActionCall:
    tag = uuid.uuid4().hex[:16]
    return ActionCall(
        action_id=f"act_{tag}",
        provider_key=f"key_{tag}",
        payload=adapter.normalize(payload),
        scope=f"test:{tag}",
        tool=tool,
        tenant="conformance",
    )


def tag() -> str:
    return uuid.uuid4().hex[:12]


async def attempt(adapter: Adapter, call: ActionCall) -> Receipt | AdapterError:
    try:
        return await adapter.execute(call)
    except AdapterError as exc:
        return exc


async def effects_reach(target: ConformanceTarget, count: int, *, within: float = 15.0) -> int:
    """The provider's effect count once it reaches `count` (a write that lands late), or what
    it is after `within` seconds."""
    deadline = time.monotonic() + within
    seen = await target.effects()
    while seen < count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        seen = await target.effects()
    return seen


def assert_no_secret(target: ConformanceTarget, *things: Any) -> None:
    for thing in things:
        texts = [str(thing), repr(thing)]
        if isinstance(thing, AdapterError):
            texts += [thing.message, repr(thing.details)]
        if isinstance(thing, Observation):
            texts += [thing.detail, repr(thing.evidence)]
        leaked = [t for t in texts if target.canary in t]
        assert not leaked, f"{target.name}: the secret leaked in {type(thing).__name__}: {leaked[0]!r}"


def assert_verified(adapter: Adapter, obs: Observation, want: Outcome, where: str) -> None:
    if adapter.capabilities.has_read_api:
        assert obs.outcome is want, f"{where}: verify gave {obs.outcome} ({obs.detail}), expected {want}"
    else:
        assert obs.outcome is Outcome.UNKNOWN, f"{where}: no read API must verify UNKNOWN, got {obs}"
        assert obs.detail, f"{where}: an UNKNOWN needs a reason"
