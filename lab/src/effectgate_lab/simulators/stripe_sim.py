"""A Stripe-compatible PaymentIntents server, for the Stripe adapter, the demo and the chaos runs.

Endpoints (form bodies as the official SDK sends them, Stripe's JSON and error shapes):

    POST /v1/payment_intents            create (with `confirm=true`: confirm at once)
    GET  /v1/payment_intents/{id}       retrieve: immediate, as at Stripe
    GET  /v1/payment_intents/search     `query=metadata['k']:'v' AND status:'succeeded'`;
                                        an intent shows only `search_lag` seconds after creation
    GET  /v1/payment_intents            list, newest first (`created[gte]`, `limit`,
                                        `starting_after`): immediate, as at Stripe

Signed webhooks (`webhooks`, a `WebhookSender`): with a URL and a secret set, each succeeded
intent is announced by `payment_intent.succeeded` `webhooks.delay` seconds later; `refund(id)`
and `dispute(id)` announce `charge.refunded` and `charge.dispute.created`; `remove(id)` deletes an
intent (a provider object gone behind the gateway's back, for the drift audit).

Behaviour copied from Stripe:

- Bearer API key auth (401 otherwise; like Stripe, the message echoes a masked key).
- `Idempotency-Key`: the first answer of an executed request (402 and 500 included) is kept and
  replayed with `Idempotent-Replayed: true`; the same key with other parameters is a 400
  `idempotency_error`; a request whose key is still in flight gets 409 `idempotency_key_in_use`.
- Test payment methods (stripe_cards.py): `pm_card_visa` (and mastercard, amex) succeed;
  `pm_card_chargeDeclined*` answer 402 `card_error`. Each token becomes a PaymentMethod (`pm_...`,
  a new id) that the intent names; a decline carries it whole in `error.payment_method` and in
  `last_payment_error`, and the intent stays `requires_payment_method` with no method: no money
  moved, so it is NOT in the ledger. (tests/test_provider_specs.py holds answers to Stripe's spec.)

Faults (see `faults.py`): `partial` creates the intent in `processing`; it becomes `succeeded`
`settle_seconds` later (the money may still move, so it IS in the ledger). `delayed_visibility`
hides the intent from search for the plan's `visibility_lag` (at least `search_lag`). The injected
`conflict` is Stripe's 409 `lock_timeout`.

Ledger: one entry per intent that moved or may still move money:
`{"kind": "payment_intent", "id", "params", "metadata", "status", "fault", "idempotency_key", "at"}`.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from aiohttp import web

from effectgate_lab.simulators.faults import Fault, FaultPlan
from effectgate_lab.simulators.idempotency import ClaimState, IdempotencyStore, fingerprint
from effectgate_lab.simulators.server import JsonDict, SimResponse, SimulatorServer
from effectgate_lab.simulators.stripe_cards import TEST_CARDS, payment_method
from effectgate_lab.simulators.stripe_wire import QueryError, matches, parse_form, parse_search_query
from effectgate_lab.simulators.webhook_sender import WebhookSender

DEFAULT_API_KEY = "sk_test_effectgate"
SUCCEEDING_METHODS = frozenset(t for t, card in TEST_CARDS.items() if card.declines is None)
# payment method -> (error code, decline code)
DECLINING_METHODS: dict[str, tuple[str, str]] = {t: c.declines for t, c in TEST_CARDS.items() if c.declines}
_ERROR_TYPES = {402: "card_error", 500: "api_error"}
# The base's injected 409 is, at Stripe, a lock timeout on the object.
_CODE_ALIASES = {"conflict": "lock_timeout"}
_MESSAGES = {
    "lock_timeout": "This object cannot be accessed right now because another API request or "
    "Stripe process is currently accessing it.",
    "idempotency_key_in_use": "There is currently another in-progress request using this "
    "Idempotent Key (that probably means you submitted twice, and the other request is still "
    "going through).",
}


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


@dataclass
class _Intent:
    data: JsonDict
    visible_at: float
    settles_at: float | None = None


class StripeSimulator(SimulatorServer):
    name: ClassVar[str] = "stripe"

    def __init__(
        self,
        *,
        api_key: str = DEFAULT_API_KEY,
        search_lag: float = 0.0,
        settle_seconds: float = 2.0,
        faults: FaultPlan | None = None,
        visibility_lag: float = 5.0,
        latency: float = 0.0,
    ) -> None:
        super().__init__(faults=faults, visibility_lag=visibility_lag, latency=latency)
        self.api_key = api_key
        self.search_lag = search_lag
        self.settle_seconds = settle_seconds
        self.intents: dict[str, _Intent] = {}
        self.keys = IdempotencyStore()
        self.webhooks = WebhookSender()

    def reset_state(self) -> None:
        self.intents.clear()
        self.keys.clear()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/payment_intents", self._create)
        app.router.add_get("/v1/payment_intents/search", self._search)
        app.router.add_get("/v1/payment_intents", self._list)
        app.router.add_get("/v1/payment_intents/{id}", self._retrieve)

    def middlewares(self) -> list[Any]:
        @web.middleware
        async def stripe_headers(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            denied = self._authenticate(request) if request.path.startswith("/v1/") else None
            response = self.render(denied) if denied else await handler(request)
            response.headers["Request-Id"] = _new_id("req")
            return response

        return [stripe_headers]

    # -- Stripe's shapes ---------------------------------------------------------------------------

    def error_response(
        self, status: int, code: str, message: str = "", *, param: str = "", **extra: Any
    ) -> SimResponse:
        code = _CODE_ALIASES.get(code, code)
        error: JsonDict = {
            "type": _ERROR_TYPES.get(status, "invalid_request_error"),
            "message": _MESSAGES.get(code, message),
        }
        if status != 500 and code:
            error["code"] = code
            error["doc_url"] = f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}"
        if param:
            error["param"] = param
        error.update(extra)
        return SimResponse(status, {"error": error})

    def _authenticate(self, request: web.Request) -> SimResponse | None:
        header = request.headers.get("Authorization", "")
        scheme, _, credential = header.partition(" ")
        if scheme.lower() == "basic":
            decoded = base64.b64decode(credential, validate=False).decode(errors="replace")
            credential = decoded.partition(":")[0]
        elif scheme.lower() != "bearer":
            credential = ""
        if not credential:
            return SimResponse(
                401,
                {"error": {"type": "invalid_request_error", "message": "You did not provide an API key."}},
            )
        if not secrets.compare_digest(credential.encode(), self.api_key.encode()):
            # Stripe echoes part of the key it got: adapters must not pass this message on.
            masked = credential[:8] + "*" * max(len(credential) - 12, 0) + credential[-4:]
            return SimResponse(
                401,
                {
                    "error": {
                        "type": "invalid_request_error",
                        "message": f"Invalid API Key provided: {masked}",
                    }
                },
            )
        return None

    # -- intents ------------------------------------------------------------------------------------

    def _view(self, intent: _Intent) -> JsonDict:
        """The intent as reads see it now (a `partial` one settles lazily)."""
        data = intent.data
        if intent.settles_at is not None and self.now() >= intent.settles_at:
            intent.settles_at = None
            data.update(status="succeeded", amount_received=data["amount"], latest_charge=_new_id("ch"))
        return dict(data)

    def _validate(self, form: JsonDict) -> SimResponse | None:
        for name in ("amount", "currency"):
            if not form.get(name):
                return self.error_response(400, "parameter_missing", f"Missing required param: {name}.", param=name)
        amount = str(form["amount"])
        if not amount.isdigit() or int(amount) < 1:
            return self.error_response(400, "parameter_invalid_integer", "Invalid positive integer", param="amount")
        currency = str(form["currency"])
        if len(currency) != 3 or not currency.isalpha() or currency != currency.lower():
            return self.error_response(400, "parameter_invalid", "Invalid currency.", param="currency")
        method = form.get("payment_method")
        if method and method not in SUCCEEDING_METHODS and method not in DECLINING_METHODS:
            return self.error_response(
                400, "resource_missing", f"No such PaymentMethod: '{method}'", param="payment_method"
            )
        if form.get("confirm") == "true" and not method:
            return self.error_response(
                400,
                "payment_intent_unexpected_state",
                "You cannot confirm this PaymentIntent because it's missing a payment method.",
            )
        if not isinstance(form.get("metadata", {}), dict):
            return self.error_response(400, "parameter_invalid", "Invalid metadata.", param="metadata")
        return None

    async def _create(self, request: web.Request) -> web.StreamResponse:
        form = parse_form((k, str(v)) for k, v in (await request.post()).items())
        invalid = self._validate(form)
        if invalid is not None:
            return self.render(invalid)
        key = request.headers.get("Idempotency-Key")
        slot = None
        if key:
            claim = self.keys.claim(key, fingerprint("POST", request.path, form))
            if claim.state is ClaimState.IN_FLIGHT:
                return self.render(self.error_response(409, "idempotency_key_in_use"))
            if claim.state is ClaimState.MISMATCH:
                return self.render(self._idempotency_error(key))
            if claim.state is ClaimState.REPLAY:
                assert claim.response is not None
                replayed = SimResponse(
                    claim.response.status,
                    claim.response.body,
                    {**claim.response.headers, "Idempotent-Replayed": "true"},
                )
                return self.render(replayed)
            slot = claim.slot

        async def commit(fault: Fault | None) -> SimResponse:
            return self._commit(form, key, fault)

        return await self.write(request, commit, slot=slot)

    def _idempotency_error(self, key: str) -> SimResponse:
        message = (
            "Keys for idempotent requests can only be used with the same parameters they were first "
            f"used with. Try using a key other than '{key}' if you meant to execute a different request."
        )
        return SimResponse(400, {"error": {"type": "idempotency_error", "message": message}})

    def _commit(self, form: JsonDict, key: str | None, fault: Fault | None) -> SimResponse:
        now = self.now()
        method = form.get("payment_method")
        # A test token names a card: Stripe makes a PaymentMethod of it, and the intent names that.
        card = payment_method(method, now) if method else None
        data: JsonDict = {
            "id": _new_id("pi"),
            "object": "payment_intent",
            "amount": int(form["amount"]),
            "amount_received": 0,
            "currency": form["currency"],
            "customer": form.get("customer"),
            "description": form.get("description"),
            "metadata": dict(form.get("metadata") or {}),
            "payment_method": card["id"] if card else None,
            "payment_method_types": form.get("payment_method_types") or ["card"],
            "capture_method": "automatic",
            "confirmation_method": "automatic",
            "created": int(now),
            "latest_charge": None,
            "last_payment_error": None,
            "livemode": False,
            "status": "requires_confirmation" if method else "requires_payment_method",
        }
        intent = _Intent(data, visible_at=now + self.visibility_delay(fault, self.search_lag))
        self.intents[data["id"]] = intent
        headers = {"Idempotency-Key": key} if key else {}
        if form.get("confirm") != "true":
            return SimResponse(200, dict(data), headers)
        if card is not None and method in DECLINING_METHODS:
            code, decline_code = DECLINING_METHODS[method]
            charge = _new_id("ch")
            error: JsonDict = {
                "type": "card_error",
                "code": code,
                "decline_code": decline_code,
                "message": "Your card was declined." if code == "card_declined" else "Your card has expired.",
                "charge": charge,
                "doc_url": f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}",
                "payment_method": card,
            }
            # A declined method is let go: the intent waits for another (Stripe's own answer).
            data.update(
                status="requires_payment_method", payment_method=None, latest_charge=charge, last_payment_error=error
            )
            body = {"error": {**error, "payment_intent": dict(data)}}
            return SimResponse(402, body, headers)
        if fault is Fault.PARTIAL:
            data["status"] = "processing"
            intent.settles_at = now + self.settle_seconds
        else:
            data.update(status="succeeded", amount_received=data["amount"], latest_charge=_new_id("ch"))
            self.webhooks.emit(self.webhooks.stripe_event("payment_intent.succeeded", dict(data)))
        self.record(
            "payment_intent",
            form,
            idempotency_key=key,
            id=data["id"],
            metadata=data["metadata"],
            status=data["status"],
            fault=fault.value if fault else None,
        )
        return SimResponse(200, dict(data), headers)

    async def _retrieve(self, request: web.Request) -> web.StreamResponse:
        intent_id = request.match_info["id"]
        intent = self.intents.get(intent_id)
        if intent is None:
            return self.render(
                self.error_response(404, "resource_missing", f"No such payment_intent: '{intent_id}'", param="intent")
            )
        return self.render(SimResponse(200, self._view(intent)))

    async def _search(self, request: web.Request) -> web.StreamResponse:
        query = request.query.get("query", "")
        if not query:
            return self.render(
                self.error_response(400, "parameter_missing", "Missing required param: query.", param="query")
            )
        try:
            clauses = parse_search_query(query)
            limit = int(request.query.get("limit", "10"))
            offset = int(request.query.get("page", "0") or "0")
        except (QueryError, ValueError) as exc:
            return self.render(self.error_response(400, "parameter_invalid", str(exc), param="query"))
        if not 1 <= limit <= 100:
            return self.render(self.error_response(400, "parameter_invalid", "Invalid limit.", param="limit"))
        now = self.now()
        # Newest first, like Stripe; invisible ones are skipped before the filter.
        found: list[JsonDict] = []
        for intent in reversed(self.intents.values()):
            if now >= intent.visible_at and matches(view := self._view(intent), clauses):
                found.append(view)
        page = found[offset : offset + limit]
        has_more = offset + limit < len(found)
        body = {
            "object": "search_result",
            "url": "/v1/payment_intents/search",
            "has_more": has_more,
            "data": page,
            "next_page": str(offset + limit) if has_more else None,
        }
        return self.render(SimResponse(200, body))

    async def _list(self, request: web.Request) -> web.StreamResponse:
        try:
            since = int(request.query.get("created[gte]", "0") or "0")
            limit = int(request.query.get("limit", "10"))
        except ValueError:
            return self.render(self.error_response(400, "parameter_invalid", "Invalid integer.", param="created"))
        after = request.query.get("starting_after", "")
        newest_first = [self._view(i) for i in reversed(self.intents.values()) if i.data["created"] >= since]
        if after:
            ids = [d["id"] for d in newest_first]
            newest_first = newest_first[ids.index(after) + 1 :] if after in ids else []
        page = newest_first[:limit]
        body = {"object": "list", "url": "/v1/payment_intents", "has_more": len(newest_first) > limit, "data": page}
        return self.render(SimResponse(200, body))

    # -- what happens at the provider later (for webhooks and the drift audit) -----------------------

    def _charge(self, intent_id: str) -> JsonDict:
        data = self._view(self.intents[intent_id])
        return {
            "id": data["latest_charge"] or _new_id("ch"),
            "object": "charge",
            "amount": data["amount"],
            "currency": data["currency"],
            "payment_intent": intent_id,
            "status": "succeeded",
        }

    def refund(self, intent_id: str, *, delay: float | None = None) -> JsonDict:
        """Refunds the intent's charge in full and announces `charge.refunded` (no metadata on the
        charge: the receiver finds the action through the PaymentIntent)."""
        charge = {**self._charge(intent_id), "refunded": True}
        charge["amount_refunded"] = charge["amount"]
        event = self.webhooks.stripe_event("charge.refunded", charge)
        self.webhooks.emit(event, delay)
        return event

    def dispute(self, intent_id: str, *, delay: float | None = None) -> JsonDict:
        charge = self._charge(intent_id)
        dispute = {
            "id": _new_id("dp"),
            "object": "dispute",
            "amount": charge["amount"],
            "currency": charge["currency"],
            "charge": charge["id"],
            "payment_intent": intent_id,
            "reason": "fraudulent",
            "status": "needs_response",
        }
        event = self.webhooks.stripe_event("charge.dispute.created", dispute)
        self.webhooks.emit(event, delay)
        return event

    def remove(self, intent_id: str) -> None:
        """Deletes an intent (gone from every read), as if removed behind the gateway's back."""
        del self.intents[intent_id]
