"""The adapter contract: how one tool becomes provider calls.

An adapter declares the payload message it takes and what its provider can promise
(`Capabilities`), and implements three things:

- `normalize(payload)`: the canonical form the fingerprint is computed from; it raises
  `InvalidPayload` (with the offending `field`) for a payload no provider call could carry;
- `execute(call)`: one provider call carrying `call.provider_key`; it returns a `Receipt`, or
  raises `DefinitiveError` (the provider refused and nothing happened), `NoEffectError` (this
  attempt was refused before acting: auth, rate limit; retry later) or `AmbiguousError`
  (something may have happened). Any other exception is treated as ambiguous;
- `verify(call)`: a read-only check of the whole postcondition against the provider's read API.
  A half-applied effect is never `CONFIRMED`; a provider without a read API answers `UNKNOWN`.

Error messages must be safe to show to agents, logs and spans: never put a secret, an
`Authorization` header or a raw provider body with credentials in them.
"""

from __future__ import annotations

import enum
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from google.protobuf.message import Message

JsonDict = dict[str, Any]

# How long a provider may go on processing a request after its connection closed, when the
# adapter knows no better: about the longest request a provider's front end (a load balancer or
# proxy, typically 60 s) lets run. Conservative on purpose: too short a bound is a NOT_FOUND
# recorded while the provider still applies the request.
KEEPS_PROCESSING = 60.0


@dataclass(frozen=True)
class Capabilities:
    """What the provider promises; the gateway's retry and verification rules read these."""

    # The provider deduplicates requests that carry the same idempotency key.
    dedups_on_key: bool
    # How long the provider remembers a key (seconds); None when it does not dedup.
    key_retention: float | None
    # How long after a write its read API may still not show it (seconds).
    consistency_window: float
    # The provider has a read API that can prove an effect (or its absence).
    has_read_api: bool
    # How long after our call ended (timed out, connection closed) the provider may still apply
    # the request (seconds): the consistency window only starts after it (docs/protocol.md).
    keeps_processing: float = KEEPS_PROCESSING
    # `verify` reads exactly the object a receipt names (by id, immediately): a webhook's event is
    # then never believed itself, its object is read and what the read shows applies
    # (capabilities.py, `ReceivesWebhooks`).
    reads_event_objects: bool = False


@dataclass(frozen=True)
class Receipt:
    """What the provider said when it answered."""

    external_id: str
    provider_request_id: str = ""
    result: JsonDict = field(default_factory=dict)
    at: float = field(default_factory=time.time)


class Outcome(enum.Enum):
    CONFIRMED = "confirmed"
    NOT_FOUND = "not_found"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Observation:
    """What a read-back of the provider found, with the evidence."""

    outcome: Outcome
    detail: str = ""
    evidence: JsonDict = field(default_factory=dict)
    at: float = field(default_factory=time.time)
    # For CONFIRMED: the effect as the read API shows it (becomes the action's receipt).
    receipt: Receipt | None = None

    @classmethod
    def unknown(cls, detail: str, **evidence: Any) -> Observation:
        return cls(Outcome.UNKNOWN, detail=detail, evidence=dict(evidence))


@dataclass(frozen=True)
class ActionCall:
    """One action as an adapter sees it, for `execute` and for `verify`."""

    action_id: str
    # The idempotency key to send; stable across retries and gateway restarts.
    provider_key: str
    # The normalised payload (an instance of the adapter's `payload_type`).
    payload: Message
    scope: str
    tool: str
    tenant: str
    attempt: int = 1
    # The receipt already stored, if any (lets verify retrieve by external id).
    receipt: Receipt | None = None
    # Which send of the action this is: 0 for the first, one more after each operator-granted
    # bypass (docs/states.md). Every generation has its own `provider_key`; the action id is shared
    # by all of them, so a read-back must tell one generation's effect from another's by what only
    # that generation wrote (its provider key), never by the action id alone.
    generation: int = 0


class AdapterError(Exception):
    """Base of the errors an adapter raises; the message must hold no secret."""

    def __init__(self, message: str, *, code: str = "", details: JsonDict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.details: JsonDict = details or {}


class DefinitiveError(AdapterError):
    """The provider refused and applied nothing (declined card, validation error)."""


class AmbiguousError(AdapterError):
    """The outcome is unknown: timeout, reset, 5xx, key in use, partial success."""


class NoEffectError(AdapterError):
    """The provider refused this attempt before acting (401, 429): nothing happened and a later
    retry with the same key is safe. Not cached like a REJECTED outcome."""


class CredentialsRefused(NoEffectError):
    """The provider refused our credentials (HTTP 401/403, an SMTP login refused): nothing
    happened, and nothing will until an operator fixes the key. The gateway logs it as a warning
    and counts it per adapter (`effectgate_provider_auth_failures_total`)."""

    def __init__(self, message: str, *, code: str = "authentication_failed", details: JsonDict | None = None) -> None:
        super().__init__(message, code=code, details=details)


class RateLimited(NoEffectError):
    """A refusal that asks for a pause (429, 503 with `Retry-After`): nothing happened. The driver
    waits `retry_after` seconds (within the caller's deadline) before it tries again, never at once."""

    def __init__(
        self, message: str, *, retry_after: float, code: str = "rate_limited", details: JsonDict | None = None
    ) -> None:
        super().__init__(message, code=code, details=details)
        self.retry_after = retry_after


class InvalidPayload(AdapterError):
    """`normalize` found the payload invalid; `field` names the offending payload field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, code="invalid_payload")
        self.field = field


class ConfigError(Exception):
    """An adapter's settings are wrong or a secret it needs is missing.

    `table` is the config table (`adapters.NAME`, filled in by the registry), `key` the key path
    inside it (`request.method`, `expect[0].path`) and `reason` what is wrong; `str()` joins them
    as `adapters.NAME.request.method: reason`, so a caller may add only the file name.
    """

    def __init__(self, reason: str, *, table: str = "", key: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.table = table
        self.key = key

    def __str__(self) -> str:
        where = ".".join(p for p in (self.table, self.key) if p).replace(".[", "[")
        return f"{where}: {self.reason}" if where else self.reason


class Adapter(ABC):
    """Base class of every adapter. Subclasses are found through the `effectgate.adapters`
    entry-point group and built with `from_settings`."""

    # The protobuf message type the tool's payload must be.
    payload_type: ClassVar[type[Message]]

    @classmethod
    @abstractmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> Adapter:
        """Builds the adapter from its `[adapters.NAME]` table of the config."""

    @property
    @abstractmethod
    def capabilities(self) -> Capabilities: ...

    def normalize(self, payload: Message) -> Message:
        """Canonical form of the payload; the default is the payload itself."""
        return payload

    @abstractmethod
    async def execute(self, call: ActionCall) -> Receipt: ...

    @abstractmethod
    async def verify(self, call: ActionCall) -> Observation: ...

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Releases connections; called once at gateway shutdown."""
