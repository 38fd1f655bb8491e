"""Square payments: each action is one Payment, created and completed in one call.

Settings (`[adapters.NAME]`, `kind = "square"`): `base_url` (default
https://connect.squareup.com), `access_token_env` or `access_token_file`, `location_id` (default:
the seller's main location), `source_ids` (the payment-method names agents use, mapped to Square
sources: a tool's payload stays the same whichever provider serves it; a name not in the map is
sent as the source id itself), `square_version` (the `Square-Version` header), `lookback` (how far
back a read-back lists payments, default 48 h), `consistency_window` (seconds, default 30:
ListPayments is eventually consistent), `timeout` (seconds, default 30); for signed webhooks
(docs/webhooks.md, `webhooks.py`) `webhook_signature_key_env` or `webhook_signature_key_file`
(several keys, comma separated, while one is replaced), `webhook_url` (the notification URL
as the subscription names it: Square signs it with the body) and `webhook_tolerance` (seconds an
event's `created_at` may be old, default 25 h: Square retries for 24).

Create: `POST /v2/payments` with `idempotency_key` (Square replays the first answer of a key),
`reference_id` = the action id (`<action id>-g<N>` after the N-th bypass: `wire.reference_id`),
`autocomplete = true`. Read-back: `GET /v2/payments/{id}` when
the receipt names the payment (immediate), else `GET /v2/payments` filtered by `begin_time` and
the exact `total`, matched on `reference_id` (Square documents no filter on it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

import httpx
from google.protobuf.message import Message
from pydantic import Field, field_validator, model_validator

from effectgate.adapters.base import (
    ActionCall,
    Adapter,
    AdapterError,
    AmbiguousError,
    Capabilities,
    CredentialsRefused,
    DefinitiveError,
    InvalidPayload,
    Observation,
    Outcome,
    Receipt,
)
from effectgate.adapters.capabilities import ProviderEffect, ProviderEvent, WebhookRejected
from effectgate.adapters.charge_card import normalize_charge
from effectgate.adapters.http_outcome import transport_error
from effectgate.adapters.redact import scrub, scrub_json
from effectgate.adapters.secrets import quiet_transport_loggers, resolved_secrets
from effectgate.adapters.settings import AdapterSettings, http_base_url, parse_settings
from effectgate.adapters.square import webhooks, wire
from effectgate.tools.v1.tools_pb2 import ChargeCard

KEY_RETENTION = 24 * 3600.0
# Payment statuses under which no money moved and none will without a new payment.
_NO_MONEY = frozenset({"FAILED", "CANCELED"})
MAX_PAGES = 20


class SquareSettings(AdapterSettings):
    base_url: str = "https://connect.squareup.com"
    access_token_env: str | None = None
    access_token_file: str | None = None
    location_id: str = ""
    source_ids: dict[str, str] = {}
    square_version: str = "2025-01-23"
    lookback: float = Field(default=2 * KEY_RETENTION, gt=0)
    consistency_window: float = Field(default=30.0, ge=0)
    timeout: float = Field(default=30.0, gt=0)
    webhook_signature_key_env: str | None = None
    webhook_signature_key_file: str | None = None
    webhook_url: str = ""
    # How old an event (its `created_at`) may be: Square retries for 24 hours (webhooks.py).
    webhook_tolerance: float = Field(default=webhooks.DEFAULT_TOLERANCE, gt=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_base_url(value)

    @field_validator("webhook_url")
    @classmethod
    def _notification_url(cls, value: str) -> str:
        return http_base_url(value) if value else value

    @model_validator(mode="after")
    def _url_with_key(self) -> SquareSettings:
        if (self.webhook_signature_key_env or self.webhook_signature_key_file) and not self.webhook_url:
            raise ValueError("webhook_url is required with a webhook signature key: Square signs it with the body")
        return self


class SquareAdapter(Adapter):
    payload_type: ClassVar[type[Message]] = ChargeCard

    def __init__(
        self, name: str, *, access_token: str, settings: SquareSettings, webhook_keys: list[str] | None = None
    ) -> None:
        self.name = name
        self._s = settings
        self._webhook_keys = list(webhook_keys or [])
        quiet_transport_loggers()
        self._http = httpx.AsyncClient(
            base_url=settings.base_url,
            timeout=settings.timeout,
            headers={
                "Authorization": f"Bearer {access_token}",
                "Square-Version": settings.square_version,
                "Accept": "application/json",
            },
        )

    def __repr__(self) -> str:
        return f"SquareAdapter(name={self.name!r})"

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> SquareAdapter:
        parsed = parse_settings(SquareSettings, settings)
        keys = webhooks.split_keys(parsed.secret("webhook_signature_key", required=False))
        return cls(name, access_token=parsed.secret("access_token"), settings=parsed, webhook_keys=keys)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            dedups_on_key=True,
            key_retention=KEY_RETENTION,
            consistency_window=self._s.consistency_window,
            has_read_api=True,
            # A webhook's object is read back by its id before it settles anything (capabilities.py).
            reads_event_objects=True,
        )

    def normalize(self, payload: Message) -> ChargeCard:
        charge = normalize_charge(payload)
        if not charge.payment_method:
            raise InvalidPayload("payment_method", "Square needs a payment method (a source)")
        return charge

    # -- execute -----------------------------------------------------------------------------

    async def execute(self, call: ActionCall) -> Receipt:
        charge = self.normalize(call.payload)
        reference = wire.reference_id(call.action_id, call.generation)
        if not reference:
            raise DefinitiveError(
                f"create payment: generation {call.generation} of this action has no reference_id within "
                f"Square's {wire.REFERENCE_LIMIT} characters; nothing was sent",
                code="reference_too_long",
            )
        body: dict[str, Any] = {
            "idempotency_key": wire.idempotency_key(call.provider_key),
            "source_id": self._s.source_ids.get(charge.payment_method, charge.payment_method),
            "amount_money": {"amount": charge.amount, "currency": charge.currency.upper()},
            "customer_id": charge.customer,
            "reference_id": reference,
            "autocomplete": True,
        }
        if self._s.location_id:
            body["location_id"] = self._s.location_id
        if charge.description:
            body["note"] = charge.description[:500]
        payment = (await self._request("POST", "/v2/payments", "create payment", json=body)).get("payment") or {}
        status = wire.safe_id(payment.get("status")) or "unrecognized"
        if status == "COMPLETED":
            return _receipt(payment)
        raise AmbiguousError(
            f"create payment: payment is {status}, not COMPLETED",
            code=f"payment_{status.lower()}",
            details={"payment": wire.safe_id(payment.get("id")), "status": status},
        )

    async def _request(self, method: str, path: str, what: str, **kwargs: Any) -> dict[str, Any]:
        try:
            answer = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise transport_error(exc, what) from None
        try:
            body = answer.json()
        except ValueError:
            body = None
        if answer.is_success and isinstance(body, dict):
            return body
        if answer.is_success:
            raise AmbiguousError(f"{what}: unreadable answer (HTTP {answer.status_code})", code="unreadable")
        error = wire.classify(answer.status_code, body, answer.headers, what)
        error.details = scrub_json(error.details, resolved_secrets())
        raise error

    # -- verify ------------------------------------------------------------------------------

    async def verify(self, call: ActionCall) -> Observation:
        charge = self.normalize(call.payload)
        external_id = call.receipt.external_id if call.receipt else ""
        lookup = "get" if external_id else "list"
        try:
            payments = await (self._get(external_id) if external_id else self._find(call, charge.amount))
        except AdapterError as exc:
            return Observation.unknown(f"read failed ({exc.code})", reason=exc.code, lookup=lookup, read_failed=True)
        obs = self.judge(call, charge, payments, lookup)
        secrets = resolved_secrets()
        return replace(obs, detail=scrub(obs.detail, secrets, None), evidence=scrub_json(obs.evidence, secrets))

    async def _get(self, payment_id: str) -> list[dict[str, Any]]:
        try:
            found = await self._request("GET", f"/v2/payments/{payment_id}", "read payment")
        except DefinitiveError as exc:
            if exc.code == "not_found":
                return []
            raise
        return [found["payment"]] if isinstance(found.get("payment"), dict) else []

    async def _list(self, since: float, total: int | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"begin_time": wire.rfc3339(since), "sort_order": "ASC", "limit": 100}
        if total is not None:
            params["total"] = total
        if self._s.location_id:
            params["location_id"] = self._s.location_id
        payments: list[dict[str, Any]] = []
        for _ in range(MAX_PAGES):
            page = await self._request("GET", "/v2/payments", "list payments", params=params)
            payments += [p for p in page.get("payments") or [] if isinstance(p, dict)]
            if not page.get("cursor"):
                return payments
            params["cursor"] = page["cursor"]
        raise AmbiguousError("list payments: too many pages", code="too_many_pages")

    async def _find(self, call: ActionCall, amount: int) -> list[dict[str, Any]]:
        """The listed payments of the action's current generation (its own `reference_id`)."""
        found = await self._list(time.time() - self._s.lookback, total=amount)
        reference = wire.reference_id(call.action_id, call.generation)
        return [p for p in found if reference and p.get("reference_id") == reference]

    def judge(self, call: ActionCall, charge: ChargeCard, payments: list[dict[str, Any]], lookup: str) -> Observation:
        """What the payments read prove about this generation's payment. A payment is this
        generation's by its `reference_id` alone: Square keeps no metadata. A payment whose
        reference is the bare action id was made by generation 0, or (before generations had their
        own reference) by a bypass generation still in doubt across the upgrade. It is counted as
        generation 0's: Square cannot tell, and the rare generation in doubt across the upgrade is
        not sent twice within Square's 24 h key retention, because its re-send carries its old
        idempotency key with a new `reference_id`, which Square refuses `IDEMPOTENCY_KEY_REUSED`
        (an ambiguous answer: the action stays in doubt for an operator)."""
        reference = wire.reference_id(call.action_id, call.generation)
        mine = sorted((p for p in payments if reference and p.get("reference_id") == reference), key=_created)
        evidence: dict[str, Any] = {
            "lookup": lookup,
            "payments": [{"id": wire.safe_id(p.get("id")), "status": wire.safe_id(p.get("status"))} for p in mine],
            "found": len(mine),
        }
        if not mine:
            if payments:
                # A read by id (the receipt's, a webhook's) of another action's or generation's payment.
                actions = {wire.action_of_reference(str(p.get("reference_id") or "")) for p in payments}
                what = "generation" if call.action_id in actions else "action"
                return Observation.unknown(f"the payment read belongs to another {what}", **evidence)
            return Observation(Outcome.NOT_FOUND, detail="no payment for this action", evidence=evidence)
        moving = [p for p in mine if p.get("status") not in _NO_MONEY]
        if len(moving) > 1:
            evidence["duplicates"] = len(moving) - 1
        completed = [p for p in mine if p.get("status") == "COMPLETED"]
        matching = [p for p in completed if not _differences(p, charge)]
        if matching:
            return Observation(
                Outcome.CONFIRMED, detail="payment completed", evidence=evidence, receipt=_receipt(matching[0])
            )
        if completed:
            evidence["differences"] = _differences(completed[0], charge)
            return Observation.unknown("a completed payment differs from the payload", **evidence)
        if moving:
            return Observation.unknown(f"payment is {wire.safe_id(moving[0].get('status'))}", **evidence)
        return Observation(Outcome.NOT_FOUND, detail="no payment moved money", evidence=evidence)

    # -- optional capabilities ---------------------------------------------------------------

    async def parse_webhook(self, body: bytes, headers: Mapping[str, str]) -> ProviderEvent:
        if not self._webhook_keys:
            raise WebhookRejected("forged", "no webhook signature key is configured for this adapter")
        event = webhooks.verify(body, headers, self._webhook_keys, self._s.webhook_url, self._s.webhook_tolerance)
        return await webhooks.to_event(event, self._action_of_payment)

    async def _action_of_payment(self, payment_id: str) -> str:
        try:
            found = await self._get(payment_id)
        except AdapterError:
            return ""
        return wire.action_of_reference(wire.safe_id(found[0].get("reference_id"))) if found else ""

    def observe_event(self, event: ProviderEvent, call: ActionCall) -> Observation:
        """A payment event judged like a read-back that found this one payment."""
        if not isinstance(event.raw, dict) or not event.kind.settles:
            return Observation.unknown("not a payment outcome", event_type=event.type)
        obs = self.judge(call, self.normalize(call.payload), [event.raw], "webhook")
        secrets = resolved_secrets()
        evidence = {**obs.evidence, "event_id": event.event_id, "event_type": event.type}
        return replace(obs, detail=scrub(obs.detail, secrets, None), evidence=scrub_json(evidence, secrets))

    async def list_effects(self, since: float) -> list[ProviderEffect]:
        found: list[ProviderEffect] = []
        for p in await self._list(since):
            if p.get("status") in _NO_MONEY:
                continue
            money = _money(p)
            fields = {
                "amount": money.get("amount"),
                "currency": str(money.get("currency") or "").lower(),
                "status": wire.safe_id(p.get("status")),
            }
            action = wire.action_of_reference(str(p.get("reference_id") or ""))
            found.append(ProviderEffect(wire.safe_id(p.get("id")), action, _created(p), fields))
        return found

    def expected_effect(self, payload: Message) -> dict[str, Any]:
        charge = self.normalize(payload)
        return {"amount": charge.amount, "currency": charge.currency}

    async def probe(self) -> str:
        """`check --probe`: lists one payment (of the configured location, if any)."""
        params: dict[str, Any] = {"limit": 1}
        if self._s.location_id:
            params["location_id"] = self._s.location_id
        try:
            await self._request("GET", "/v2/payments", "list payments", params=params)
        except CredentialsRefused as exc:
            raise CredentialsRefused(f"list payments: refused ({exc.code})", code=exc.code) from None
        return "listed 1 payment"

    async def close(self) -> None:
        await self._http.aclose()


def _money(payment: Mapping[str, Any]) -> Mapping[str, Any]:
    money = payment.get("amount_money")
    return money if isinstance(money, dict) else {}


def _created(payment: Mapping[str, Any]) -> float:
    return wire.timestamp(payment.get("created_at"))


def _receipt(payment: Mapping[str, Any]) -> Receipt:
    money = _money(payment)
    result = {
        "status": payment.get("status"),
        "amount": money.get("amount"),
        "currency": str(money.get("currency") or "").lower(),
        "customer": payment.get("customer_id") or "",
    }
    secrets = resolved_secrets()
    return Receipt(scrub(wire.safe_id(payment.get("id")), secrets, None), "", scrub_json(result, secrets))


def _differences(payment: Mapping[str, Any], charge: ChargeCard) -> list[str]:
    money = _money(payment)
    diffs = []
    if money.get("amount") != charge.amount:
        diffs.append("amount")
    if str(money.get("currency") or "").lower() != charge.currency:
        diffs.append("currency")
    if (payment.get("customer_id") or "") != charge.customer:
        diffs.append("customer")
    return diffs
