"""A scripted adapter over a small provider model, for in-process protocol tests."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from google.protobuf.message import Message

from effectgate.adapters.base import (
    ActionCall,
    Adapter,
    AmbiguousError,
    Capabilities,
    Observation,
    Outcome,
    Receipt,
)
from effectgate.tools.v1 import tools_pb2


@dataclass(frozen=True)
class Lost:
    """The provider applies the effect, then its answer is lost (the adapter sees a reset)."""

    detail: str = "connection reset after the request was sent"


@dataclass
class Hang:
    """Blocks until `release` is set (`entered` tells the test it got there), then behaves as
    `then` (None: the provider's normal behaviour)."""

    then: Any = None
    release: asyncio.Event = field(default_factory=asyncio.Event)
    entered: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class Effect:
    """One effect the provider model applied (what a provider's ledger would show)."""

    action_id: str
    provider_key: str
    receipt: Receipt
    at: float


class ScriptedAdapter(Adapter):
    """`execute` steps: None (apply the effect, answer with a receipt), `Lost()`, an exception
    to raise with no effect (DefinitiveError, NoEffectError, RateLimited, AmbiguousError, any
    other), or `Hang(...)`. `verify` steps: None (read the provider model), an Observation, an
    exception to raise, or `Hang(...)`. With the script empty, every call is a None step.

    `payload_type` is the message the tool takes: `ChargeCard` by default, any other for any other
    tool (`struct_pb2.Struct` for a custom JSON tool); the model applies it the same way."""

    payload_type: ClassVar[type[Message]] = tools_pb2.ChargeCard

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        dedups_on_key: bool = True,
        key_retention: float | None = None,
        consistency_window: float = 1.0,
        has_read_api: bool = True,
        search_lag: float = 0.0,
        keeps_processing: float = 0.0,
        payload_type: type[Message] = tools_pb2.ChargeCard,
    ) -> None:
        # Per instance, not per class: one kit adapter stands in for any tool's provider.
        object.__setattr__(self, "payload_type", payload_type)
        self.clock = clock
        self._capabilities = Capabilities(
            dedups_on_key, key_retention, consistency_window, has_read_api, keeps_processing=keeps_processing
        )
        # Virtual seconds after a write until the read API shows it.
        self.search_lag = search_lag
        self.execute_script: deque[Any] = deque()
        self.verify_script: deque[Any] = deque()
        self.effects: list[Effect] = []
        self.executed: list[ActionCall] = []
        self.executed_at: list[float] = []
        self.verified: list[ActionCall] = []

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> Adapter:
        raise NotImplementedError("built by the test kit, never from a config")

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def script_execute(self, *steps: Any) -> None:
        """Answers of the next `execute` calls, in order (then the normal behaviour)."""
        self.execute_script.extend(steps)

    def script_verify(self, *steps: Any) -> None:
        """Answers of the next `verify` calls, in order (then reads of the provider model)."""
        self.verify_script.extend(steps)

    def effects_of(self, action_id: str) -> list[Effect]:
        """The effects applied for one action (more than one is a duplicate)."""
        return [e for e in self.effects if e.action_id == action_id]

    async def execute(self, call: ActionCall) -> Receipt:
        self.executed.append(call)
        self.executed_at.append(self.clock())
        step = self.execute_script.popleft() if self.execute_script else None
        if isinstance(step, Hang):
            step.entered.set()
            await step.release.wait()
            step = step.then
        if isinstance(step, BaseException):
            raise step
        receipt = self._apply(call)
        if isinstance(step, Lost):
            raise AmbiguousError(step.detail, code="reset")
        return receipt

    async def verify(self, call: ActionCall) -> Observation:
        self.verified.append(call)
        step = self.verify_script.popleft() if self.verify_script else None
        if isinstance(step, Hang):
            step.entered.set()
            await step.release.wait()
            step = step.then
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, Observation):
            return step
        return self.read(call.action_id, call.provider_key)

    def read(self, action_id: str, provider_key: str | None = None) -> Observation:
        """What the provider's read API shows now: the action's effects made with `provider_key`
        (one generation's; None: every generation's)."""
        if not self._capabilities.has_read_api:
            return Observation.unknown("this provider has no read API")
        now = self.clock()
        visible = [
            e
            for e in self.effects_of(action_id)
            if e.at + self.search_lag <= now and provider_key in (None, e.provider_key)
        ]
        if visible:
            return Observation(Outcome.CONFIRMED, detail="found by search", receipt=visible[0].receipt, at=now)
        return Observation(Outcome.NOT_FOUND, detail="no match", at=now)

    def _apply(self, call: ActionCall) -> Receipt:
        if self._capabilities.dedups_on_key:
            for effect in self.effects:
                if effect.provider_key == call.provider_key:
                    return effect.receipt  # the provider absorbs a repeated key
        receipt = Receipt(external_id=f"ex_{len(self.effects) + 1}", result={"key": call.provider_key}, at=self.clock())
        self.effects.append(Effect(call.action_id, call.provider_key, receipt, self.clock()))
        return receipt
