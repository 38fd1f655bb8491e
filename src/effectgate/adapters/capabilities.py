"""Optional adapter capabilities: what a provider says on its own.

An adapter that implements one of these protocols gets the matching gateway feature; the
gateway checks with `isinstance` (the protocols are runtime-checkable), so adapters without
them keep working unchanged:

- `ReceivesWebhooks`: the provider signs and sends events. `parse_webhook` verifies the
  signature the provider's own way and raises `WebhookRejected` (forged, stale, malformed);
  `observe_event` turns a verified event into an `Observation` of one action, judged against the
  action's payload like a read-back (docs/webhooks.md). An adapter whose `verify` reads exactly
  the object a receipt names (by id, immediately) says `reads_event_objects=True` in its
  `Capabilities`: the gateway then never believes the event itself, it reads the
  event's object (`verify` of the action with a receipt naming `ProviderEvent.object_id`) and
  applies what the read shows. Its judge marks `found` (how many of the action's objects the
  read saw) in the evidence, and `read_failed` on a read that could not be made.
- `ListsEffects`: the provider's read API can list the objects made since a time, with the
  action id the adapter wrote into them (`list_effects`), and the adapter can say which of an
  effect's fields a payload expects (`expected_effect`): the drift audit compares the two.
- `ProbesCredentials`: one harmless read that proves the configured credentials and address
  work (`effectgate check --probe`): it writes nothing and raises an `AdapterError` naming what
  failed (code `authentication_failed` for refused credentials).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from google.protobuf.message import Message

from effectgate.adapters.base import ActionCall, JsonDict, Observation


class EventKind(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"
    REFUNDED = "refunded"
    DISPUTED = "disputed"
    OTHER = "other"

    @property
    def settles(self) -> bool:
        """An outcome of the write itself (as opposed to something that happened to it later)."""
        return self in (EventKind.SUCCEEDED, EventKind.FAILED, EventKind.CANCELED)


@dataclass(frozen=True)
class ProviderEvent:
    """A verified provider event, as the gateway needs it."""

    event_id: str
    kind: EventKind
    # The provider's event type (`payment_intent.succeeded`): for logs and notes.
    type: str
    # The action the event is about ("" when the object carries no action id of ours).
    action_id: str
    # The provider object the event is about (a PaymentIntent id).
    object_id: str = ""
    # Safe, small facts for the action's history (amount refunded, dispute reason).
    detail: JsonDict = field(default_factory=dict)
    # The adapter's own parsed event, handed back to `observe_event`.
    raw: Any = None


class WebhookRejected(Exception):
    """A webhook that must change nothing. `reason`: `forged` (no valid signature), `stale`
    (signed outside the tolerance), `malformed` (not an event this adapter reads)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@runtime_checkable
class ReceivesWebhooks(Protocol):
    async def parse_webhook(self, body: bytes, headers: Mapping[str, str]) -> ProviderEvent:
        """Verifies and parses one delivery (`headers` with lower-case names); raises
        `WebhookRejected`. May read the provider to find the action of an object (a refund's
        PaymentIntent), but never writes."""
        ...

    def observe_event(self, event: ProviderEvent, call: ActionCall) -> Observation:
        """What a settling event (`kind.settles`) proves about the action `call` describes."""
        ...


@dataclass(frozen=True)
class ProviderEffect:
    """One object at the provider, as the drift audit sees it."""

    object_id: str
    # The action id the adapter wrote into the object ("" when none: made around the gateway).
    action_id: str
    created: float
    # The fields the audit compares with the payload (amount, currency), and the status.
    fields: JsonDict = field(default_factory=dict)


@runtime_checkable
class ListsEffects(Protocol):
    async def list_effects(self, since: float) -> list[ProviderEffect]:
        """Every effect made at the provider since `since` (Unix seconds), whoever made it."""
        ...

    def expected_effect(self, payload: Message) -> JsonDict:
        """The fields of `ProviderEffect.fields` that a (normalised) payload determines."""
        ...


@runtime_checkable
class ProbesCredentials(Protocol):
    async def probe(self) -> str:
        """One harmless read (list one object, fetch account or server info, EHLO and login):
        returns what was checked ("listed 1 payment intent"), or raises an `AdapterError` whose
        message is safe to print. Never writes, never sends."""
        ...
