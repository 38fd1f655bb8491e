"""Stripe payments: each action is one PaymentIntent, created and confirmed in one call.

Settings (`[adapters.stripe]`): `api_base` (default https://api.stripe.com), `api_key_env` or
`api_key_file`, `consistency_window` (seconds, default 60: Stripe search can lag about a
minute), `timeout` (seconds per HTTP request, default 30); for signed webhooks
(docs/webhooks.md) `webhook_secret_env` or `webhook_secret_file` (several secrets, comma
separated, during a rotation) and `webhook_tolerance` (seconds, default 300).

The official SDK runs with its own retries off: the gateway owns retries, and a retry must carry
the same idempotency key. Every SDK failure goes through `classify`, which builds the message
from Stripe's codes only, because Stripe's own messages can echo part of the API key.

The SDK speaks HTTP through its aiohttp client. The create (the hot path) is `create.Create`:
the SDK's headers, encoding, session and error classes without its per-request machinery, and
without building `StripeObject`s from the answer (the same request on the wire as the SDK's
`raw_request_async`, tests/test_stripe_create.py). Reads (verify, lists) go through the SDK.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar, TypeVar

import aiohttp
import stripe
from google.protobuf.message import Message
from pydantic import Field, field_validator
from stripe.params import PaymentIntentCreateParams

from effectgate.adapters.base import (
    ActionCall,
    Adapter,
    AdapterError,
    AmbiguousError,
    Capabilities,
    CredentialsRefused,
    DefinitiveError,
    Observation,
    Outcome,
    Receipt,
)
from effectgate.adapters.capabilities import ProviderEffect, ProviderEvent, WebhookRejected
from effectgate.adapters.charge_card import normalize_charge
from effectgate.adapters.redact import scrub, scrub_json
from effectgate.adapters.secrets import quiet_transport_loggers, resolved_secrets
from effectgate.adapters.settings import AdapterSettings, http_base_url, parse_settings
from effectgate.adapters.stripe import webhooks
from effectgate.adapters.stripe.create import Create
from effectgate.adapters.stripe.errors import _code, _guard, _id, classify
from effectgate.adapters.stripe.intents import (
    _UNMARKED,
    ACTION_METADATA_KEY,
    KEY_METADATA_KEY,
    _action_of,
    _differences,
    _generation_matches,
    _get,
    _key_of,
    _metadata_query,
    _receipt,
    _request_id,
)

# `classify` moved to errors.py; re-exported for code that imports it from here.
__all__ = ["ACTION_METADATA_KEY", "KEY_METADATA_KEY", "StripeAdapter", "StripeSettings", "classify"]
from effectgate.tools.v1.tools_pb2 import ChargeCard

DEFAULT_API_BASE = "https://api.stripe.com"
KEY_RETENTION = 24 * 3600.0  # Stripe prunes keys after at least 24 h
# Intent statuses under which money has not moved and cannot move without a new confirmation.
_NO_MONEY = frozenset({"requires_payment_method", "canceled"})
_SAFE_CODE = re.compile(r"[a-z0-9_]{1,64}")
_SAFE_ID = re.compile(r"[A-Za-z0-9_]{1,128}")
T = TypeVar("T")


class StripeSettings(AdapterSettings):
    api_base: str = DEFAULT_API_BASE
    api_key_env: str | None = None
    api_key_file: str | None = None
    # Stripe search can lag about a minute behind a write.
    consistency_window: float = Field(default=60.0, ge=0)
    timeout: float = Field(default=30.0, gt=0)
    webhook_secret_env: str | None = None
    webhook_secret_file: str | None = None
    webhook_tolerance: float = Field(default=300.0, gt=0)

    @field_validator("api_base")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_base_url(value)


class StripeAdapter(Adapter):
    payload_type: ClassVar[type[Message]] = ChargeCard

    def __init__(
        self,
        name: str,
        *,
        api_key: str,
        api_base: str = DEFAULT_API_BASE,
        consistency_window: float = 60.0,
        timeout: float = 30.0,
        webhook_secrets: list[str] | None = None,
        webhook_tolerance: float = 300.0,
    ) -> None:
        # No telemetry id file in the home directory, no platform details in headers.
        stripe.enable_telemetry = False
        self.name = name
        self._consistency_window = consistency_window
        self._webhook_secrets = list(webhook_secrets or [])
        self._webhook_tolerance = webhook_tolerance
        quiet_transport_loggers()
        self._http = stripe.AIOHTTPClient(timeout=aiohttp.ClientTimeout(total=timeout))
        self._client = stripe.StripeClient(
            api_key,
            base_addresses={"api": api_base},
            max_network_retries=0,
            http_client=self._http,
        )
        self._create = Create(self._client, self._http)

    def __repr__(self) -> str:
        return f"StripeAdapter(name={self.name!r})"

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> StripeAdapter:
        parsed = parse_settings(StripeSettings, settings)
        return cls(
            name,
            api_key=parsed.secret("api_key"),
            api_base=parsed.api_base,
            consistency_window=parsed.consistency_window,
            timeout=parsed.timeout,
            webhook_secrets=webhooks.split_secrets(parsed.secret("webhook_secret", required=False)),
            webhook_tolerance=parsed.webhook_tolerance,
        )

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            dedups_on_key=True,
            key_retention=KEY_RETENTION,
            consistency_window=self._consistency_window,
            has_read_api=True,
            # A webhook's object is read back by its id before it settles anything (capabilities.py).
            reads_event_objects=True,
        )

    def normalize(self, payload: Message) -> ChargeCard:
        return normalize_charge(payload)

    async def execute(self, call: ActionCall) -> Receipt:
        charge = self.normalize(call.payload)
        params: PaymentIntentCreateParams = {
            "amount": charge.amount,
            "currency": charge.currency,
            "customer": charge.customer,
            "confirm": True,
            # Nobody is at a checkout page: a card needing authentication fails instead of waiting.
            "off_session": True,
            # Cards only, with no redirect step: an agent cannot send anyone to a bank page.
            "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
            "metadata": {ACTION_METADATA_KEY: call.action_id, KEY_METADATA_KEY: call.provider_key},
        }
        if charge.payment_method:
            params["payment_method"] = charge.payment_method
        if charge.description:
            params["description"] = charge.description
        answer = await _guard(self._create(call.provider_key, params), "create payment")
        intent = answer.data if isinstance(answer.data, dict) else {}
        if intent.get("status") == "succeeded":
            return _receipt(intent, answer.request_id or "")
        # `processing` (and any state that may still move money) proves nothing yet: verify later.
        status = _code(intent.get("status"), "unrecognized")
        raise AmbiguousError(
            f"create payment: intent is {status}, not succeeded",
            code=f"payment_{status}",
            details={"payment_intent": _id(intent.get("id")), "status": status},
        )

    async def verify(self, call: ActionCall) -> Observation:
        charge = self.normalize(call.payload)
        try:
            lookup, intents, request_id = await self._read(call)
        except AdapterError as exc:
            lookup = "retrieve" if call.receipt and call.receipt.external_id else "search"
            return Observation.unknown(f"read failed ({exc.code})", reason=exc.code, lookup=lookup, read_failed=True)
        obs = self._judge(call, charge, intents, lookup, request_id)
        secrets = resolved_secrets()
        return replace(obs, detail=scrub(obs.detail, secrets, None), evidence=scrub_json(obs.evidence, secrets))

    async def _read(self, call: ActionCall) -> tuple[str, list[stripe.PaymentIntent], str]:
        """(lookup, intents, request id): by the receipt's id if there is one (immediate at
        Stripe), else by searching the action id in metadata (eventually consistent)."""
        external_id = call.receipt.external_id if call.receipt else ""
        if external_id:
            try:
                intent = await _guard(self._client.v1.payment_intents.retrieve_async(external_id), "read payment")
            except DefinitiveError as exc:
                if exc.code != "resource_missing":
                    raise
                return "retrieve", [], ""
            return "retrieve", [intent], _request_id(intent)
        found = await _guard(
            self._client.v1.payment_intents.search_async(
                params={"query": _metadata_query(call.action_id), "limit": 100}
            ),
            "search payments",
        )
        return "search", list(found.data), _request_id(found)

    def _judge(
        self,
        call: ActionCall,
        charge: ChargeCard,
        intents: list[stripe.PaymentIntent],
        lookup: str,
        request_id: str,
    ) -> Observation:
        """What the intents found prove about this generation's payment."""
        ours = [i for i in intents if _action_of(i) == call.action_id]
        mine = sorted((i for i in ours if _generation_matches(i, call)), key=lambda i: _get(i, "created") or 0)
        # Another generation's intents (and, for a later generation, the unmarked intents written
        # before the provider key was: see `_generation_matches`) never confirm this one.
        others = [i for i in ours if not _generation_matches(i, call)]
        unmarked = [i for i in others if not _key_of(i) and _get(i, "status") not in _NO_MONEY]
        evidence: dict[str, Any] = {
            "lookup": lookup,
            "payment_intents": [{"id": _get(i, "id"), "status": _get(i, "status")} for i in mine],
            "found": len(mine),
        }
        if others:
            evidence["other_generations"] = [{"id": _get(i, "id"), "status": _get(i, "status")} for i in others]
        if not mine:
            if len(ours) < len(intents) or (others and lookup != "search"):
                # A read by id (the receipt's, a webhook's object) that shows another action's or
                # another generation's intent proves nothing about this one.
                what = "generation" if ours else "action"
                return Observation.unknown(f"the PaymentIntent read belongs to another {what}", **evidence)
            if unmarked:
                return Observation.unknown(_UNMARKED, **evidence)
            return Observation(Outcome.NOT_FOUND, detail="no PaymentIntent for this action", evidence=evidence)
        moving = [i for i in mine if _get(i, "status") not in _NO_MONEY]
        if len(moving) > 1:
            # More than one intent moved (or may move) money for one action: never hide it.
            evidence["duplicates"] = len(moving) - 1
        succeeded = [i for i in mine if _get(i, "status") == "succeeded"]
        matching = [i for i in succeeded if not _differences(i, charge)]
        if matching:
            intent = matching[0]
            receipt = _receipt(intent.to_dict(), request_id)
            return Observation(Outcome.CONFIRMED, detail="payment succeeded", evidence=evidence, receipt=receipt)
        if unmarked:
            return Observation.unknown(_UNMARKED, **evidence)
        if succeeded:
            evidence["differences"] = _differences(succeeded[0], charge)
            return Observation.unknown("a succeeded payment differs from the payload", **evidence)
        if moving:
            return Observation.unknown(f"payment is {_code(_get(moving[0], 'status'), 'unrecognized')}", **evidence)
        # Optional all the way down: a failed 3-D Secure check has no decline_code, a canceled
        # intent no last_payment_error at all (Stripe sends them absent or null).
        declined = [i for i in mine if _get(i, "last_payment_error")]
        if declined:
            error = _get(declined[-1], "last_payment_error")
            evidence["declined"] = {
                "code": _code(_get(error, "code"), ""),
                "decline_code": _code(_get(error, "decline_code"), ""),
            }
        return Observation(Outcome.NOT_FOUND, detail="no payment moved money", evidence=evidence)

    # -- optional capabilities (adapters/capabilities.py) -------------------------------------------

    async def parse_webhook(self, body: bytes, headers: Mapping[str, str]) -> ProviderEvent:
        if not self._webhook_secrets:
            raise WebhookRejected("forged", "no webhook secret is configured for this adapter")
        event = webhooks.verify(body, headers, self._webhook_secrets, self._webhook_tolerance)
        return await webhooks.to_event(event, ACTION_METADATA_KEY, self._action_of_intent)

    async def _action_of_intent(self, intent_id: str) -> str:
        try:
            intent = await _guard(self._client.v1.payment_intents.retrieve_async(intent_id), "read payment")
        except AdapterError:
            return ""
        return _action_of(intent)

    def observe_event(self, event: ProviderEvent, call: ActionCall) -> Observation:
        """A PaymentIntent event judged like a read-back that found this one intent."""
        if not isinstance(event.raw, stripe.PaymentIntent) or not event.kind.settles:
            return Observation.unknown("not a PaymentIntent outcome", event_type=event.type)
        obs = self._judge(call, self.normalize(call.payload), [event.raw], "webhook", "")
        return replace(obs, evidence={**obs.evidence, "event_id": event.event_id, "event_type": event.type})

    async def list_effects(self, since: float) -> list[ProviderEffect]:
        """PaymentIntents created since `since` that moved (or may move) money."""
        page = await _guard(
            self._client.v1.payment_intents.list_async(params={"created": {"gte": int(since)}, "limit": 100}),
            "list payments",
        )
        found: list[ProviderEffect] = []
        async for intent in page.auto_paging_iter():
            if intent.status in _NO_MONEY:
                continue
            fields = {"amount": intent.amount, "currency": (intent.currency or "").lower(), "status": intent.status}
            found.append(ProviderEffect(_id(intent.id), _action_of(intent), float(intent.created), fields))
        return found

    def expected_effect(self, payload: Message) -> dict[str, Any]:
        charge = self.normalize(payload)
        return {"amount": charge.amount, "currency": charge.currency}

    async def probe(self) -> str:
        """`check --probe`: lists one PaymentIntent, a read every key that may charge may do."""
        try:
            await _guard(self._client.v1.payment_intents.list_async(params={"limit": 1}), "list payment intents")
        except CredentialsRefused as exc:
            raise CredentialsRefused(f"list payment intents: refused ({exc.code})", code=exc.code) from None
        return "listed 1 payment intent"

    async def close(self) -> None:
        await self._http.close_async()  # type: ignore[no-untyped-call]
