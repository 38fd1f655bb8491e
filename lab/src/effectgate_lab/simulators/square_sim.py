"""A Square-compatible Payments API server, for the Square adapter, its conformance run and docs.

Endpoints (Square's JSON shapes: `{"payment": {...}}`, errors as `{"errors": [{category, code,
detail, field}]}`):

    POST /v2/payments          CreatePayment: `idempotency_key` (at most 45 characters),
                               `source_id`, `amount_money {amount, currency}`, `customer_id`,
                               `reference_id` (at most 40), `note`, `autocomplete`
    GET  /v2/payments/{id}     GetPayment: immediate
    GET  /v2/payments          ListPayments: `begin_time`, `end_time` (RFC 3339, on created_at),
                               `sort_order`, `cursor`, `limit`, `total` (exact amount), `location_id`;
                               eventually consistent: a payment shows `list_lag` seconds after it
                               was created (more under `delayed_visibility`)

Behaviour copied from Square: Bearer access token (401 `UNAUTHORIZED`); the idempotency key
replays the first answer, and the same key with other parameters is 400
`IDEMPOTENCY_KEY_REUSED`; test sources `cnon:card-nonce-ok` succeed, `cnon:card-nonce-declined`
is a 402 `PAYMENT_METHOD_ERROR` / `GENERIC_DECLINE` with a `FAILED` payment (no money moved: not
in the ledger). Faults (faults.py): `partial` leaves the payment `APPROVED` (authorized, not
completed), `COMPLETED` `settle_seconds` later (money may move: in the ledger); the injected
`conflict` is a 409 `CONFLICT`. `remove(id)` deletes a payment (for the drift audit).

Signed webhooks (`webhooks`, a `WebhookSender` with Square's scheme): with a URL and a signature
key set, every payment is announced by `payment.created` `webhooks.delay` seconds later, and a
partial one by `payment.updated` when it completes; `refund(id)` and `dispute(id)` send a
completed `refund.updated` and a `dispute.created` naming the payment (not its reference).

Ledger: `{"kind": "payment", "id", "params", "reference_id", "status", "fault", "idempotency_key", "at"}`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from aiohttp import web

from effectgate_lab.simulators.faults import Fault, FaultPlan
from effectgate_lab.simulators.idempotency import ClaimState, IdempotencyStore, fingerprint
from effectgate_lab.simulators.server import JsonDict, SimResponse, SimulatorServer
from effectgate_lab.simulators.webhook_sender import WebhookSender

DEFAULT_TOKEN = "EAAA_test_effectgate"
SUCCEEDING_SOURCES = frozenset({"cnon:card-nonce-ok"})
DECLINING_SOURCES = {"cnon:card-nonce-declined": "GENERIC_DECLINE", "cnon:card-nonce-rejected-cvv": "CVV_FAILURE"}
_CATEGORY = {400: "INVALID_REQUEST_ERROR", 401: "AUTHENTICATION_ERROR", 402: "PAYMENT_METHOD_ERROR"}
_CATEGORY |= {409: "INVALID_REQUEST_ERROR", 429: "RATE_LIMIT_ERROR", 500: "API_ERROR", 503: "API_ERROR"}
_CODES = {"conflict": "CONFLICT", "rate_limited": "RATE_LIMITED", "api_error": "INTERNAL_SERVER_ERROR"}


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class _Payment:
    data: JsonDict
    created: float
    visible_at: float
    settles_at: float | None = None


class SquareSimulator(SimulatorServer):
    name: ClassVar[str] = "square"

    def __init__(
        self,
        *,
        access_token: str = DEFAULT_TOKEN,
        list_lag: float = 0.0,
        settle_seconds: float = 2.0,
        faults: FaultPlan | None = None,
        visibility_lag: float = 5.0,
        latency: float = 0.0,
        location_id: str = "L_SIM_MAIN",
    ) -> None:
        super().__init__(faults=faults, visibility_lag=visibility_lag, latency=latency)
        self.access_token = access_token
        self.list_lag = list_lag
        self.settle_seconds = settle_seconds
        self.location_id = location_id
        self.payments: dict[str, _Payment] = {}
        self.keys = IdempotencyStore()
        self.webhooks = WebhookSender(scheme="square")

    def reset_state(self) -> None:
        self.payments.clear()
        self.keys.clear()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v2/payments", self._create)
        app.router.add_get("/v2/payments", self._list)
        app.router.add_get("/v2/payments/{id}", self._get)

    def middlewares(self) -> list[Any]:
        @web.middleware
        async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
            if request.path.startswith("/v2/"):
                scheme, _, token = request.headers.get("Authorization", "").partition(" ")
                if scheme.lower() != "bearer" or not secrets.compare_digest(token.encode(), self.access_token.encode()):
                    return self.render(
                        self.error_response(401, "UNAUTHORIZED", "This request could not be authorized.")
                    )
            response: web.StreamResponse = await handler(request)
            response.headers["Square-Version"] = "2025-01-23"
            return response

        return [auth]

    def error_response(
        self, status: int, code: str, message: str = "", *, field: str = "", **extra: Any
    ) -> SimResponse:
        error: JsonDict = {"category": _CATEGORY.get(status, "API_ERROR"), "code": _CODES.get(code, code)}
        error["detail"] = message or code
        if field:
            error["field"] = field
        body: JsonDict = {"errors": [error], **extra}
        return SimResponse(status, body)

    # -- payments -----------------------------------------------------------------------------

    def _view(self, payment: _Payment) -> JsonDict:
        if payment.settles_at is not None and self.now() >= payment.settles_at:
            payment.settles_at = None
            payment.data.update(status="COMPLETED", updated_at=rfc3339(self.now()))
        return dict(payment.data)

    def _validate(self, body: JsonDict) -> SimResponse | None:
        key = body.get("idempotency_key")
        if not isinstance(key, str) or not 1 <= len(key) <= 45:
            return self.error_response(
                400, "INVALID_VALUE", "idempotency_key: 1 to 45 characters", field="idempotency_key"
            )
        money = body.get("amount_money")
        if not isinstance(money, dict) or not isinstance(money.get("amount"), int) or money["amount"] < 1:
            return self.error_response(
                400, "INVALID_VALUE", "amount_money.amount must be positive", field="amount_money"
            )
        currency = money.get("currency")
        if not isinstance(currency, str) or len(currency) != 3 or not currency.isupper():
            return self.error_response(400, "INVALID_VALUE", "amount_money.currency", field="amount_money.currency")
        source = body.get("source_id")
        if source not in SUCCEEDING_SOURCES and source not in DECLINING_SOURCES:
            return self.error_response(400, "NOT_FOUND", "source_id not found", field="source_id")
        if len(str(body.get("reference_id") or "")) > 40:
            return self.error_response(400, "VALUE_TOO_LONG", "reference_id: at most 40", field="reference_id")
        return None

    async def _create(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError
        except ValueError:
            return self.render(self.error_response(400, "BAD_REQUEST", "the body is not a JSON object"))
        invalid = self._validate(body)
        if invalid is not None:
            return self.render(invalid)
        key = str(body["idempotency_key"])
        claim = self.keys.claim(key, fingerprint("POST", request.path, {k: v for k, v in body.items()}))
        if claim.state is ClaimState.IN_FLIGHT:
            return self.render(self.error_response(409, "CONFLICT", "a request with this key is in progress"))
        if claim.state is ClaimState.MISMATCH:
            return self.render(self.error_response(400, "IDEMPOTENCY_KEY_REUSED", "key reused with other parameters"))
        if claim.state is ClaimState.REPLAY:
            assert claim.response is not None
            return self.render(claim.response)

        async def commit(fault: Fault | None) -> SimResponse:
            return self._commit(body, key, fault)

        return await self.write(request, commit, slot=claim.slot)

    def _commit(self, body: JsonDict, key: str, fault: Fault | None) -> SimResponse:
        now = self.now()
        money = body["amount_money"]
        data: JsonDict = {
            "id": secrets.token_urlsafe(18).replace("-", "x").replace("_", "y"),
            "created_at": rfc3339(now),
            "updated_at": rfc3339(now),
            "amount_money": dict(money),
            "total_money": dict(money),
            "status": "COMPLETED",
            "source_type": "CARD",
            "location_id": body.get("location_id") or self.location_id,
            "customer_id": body.get("customer_id"),
            "reference_id": body.get("reference_id"),
            "note": body.get("note"),
        }
        # Square leaves out the fields a payment does not have (its spec's strings are never null).
        data = {k: v for k, v in data.items() if v is not None}
        payment = _Payment(data, now, visible_at=now + self.visibility_delay(fault, self.list_lag))
        self.payments[data["id"]] = payment
        source = str(body["source_id"])
        if source in DECLINING_SOURCES:
            data["status"] = "FAILED"
            self._announce("payment.created", data)
            detail = f"Authorization error: '{DECLINING_SOURCES[source]}'"
            return self.error_response(402, DECLINING_SOURCES[source], detail, payment=dict(data))
        if fault is Fault.PARTIAL or body.get("autocomplete") is False:
            data["status"] = "APPROVED"
            if fault is Fault.PARTIAL:
                payment.settles_at = now + self.settle_seconds
                completed = {**data, "status": "COMPLETED"}
                self._announce("payment.updated", completed, self.webhooks.delay + self.settle_seconds)
        self._announce("payment.created", data)
        params = {"amount": money["amount"], "currency": money["currency"], "source_id": source}
        self.record(
            "payment",
            params,
            idempotency_key=key,
            id=data["id"],
            reference_id=data.get("reference_id"),
            status=data["status"],
            fault=fault.value if fault else None,
        )
        return SimResponse(200, {"payment": dict(data)})

    async def _get(self, request: web.Request) -> web.StreamResponse:
        payment = self.payments.get(request.match_info["id"])
        if payment is None:
            return self.render(self.error_response(404, "NOT_FOUND", "Could not find payment"))
        return self.render(SimResponse(200, {"payment": self._view(payment)}))

    async def _list(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        try:
            begin = parse_rfc3339(q["begin_time"]) if "begin_time" in q else self.now() - 365 * 86400
            end = parse_rfc3339(q["end_time"]) if "end_time" in q else self.now()
            limit = min(int(q.get("limit", "100")), 100)
            offset = int(q.get("cursor", "0") or "0")
            total = int(q["total"]) if "total" in q else None
        except (ValueError, KeyError):
            return self.render(self.error_response(400, "INVALID_VALUE", "bad query parameter"))
        now = self.now()
        found = [
            self._view(p)
            for p in self.payments.values()
            if now >= p.visible_at
            and begin <= p.created <= end
            and (total is None or p.data["total_money"]["amount"] == total)
            and ("location_id" not in q or p.data["location_id"] == q["location_id"])
        ]
        found.sort(key=lambda d: d["created_at"], reverse=q.get("sort_order", "DESC") != "ASC")
        page = found[offset : offset + limit]
        body: JsonDict = {"payments": page} if page else {}
        if offset + limit < len(found):
            body["cursor"] = str(offset + limit)
        return self.render(SimResponse(200, body))

    # -- what happens at the provider later (for webhooks and the drift audit) -----------------------

    def _announce(self, event_type: str, payment: JsonDict, delay: float | None = None) -> None:
        self.webhooks.emit(self.webhooks.square_event(event_type, "payment", dict(payment)), delay)

    def refund(self, payment_id: str, *, delay: float | None = None) -> JsonDict:
        """Refunds the payment in full and announces the completed refund (`refund.updated`)."""
        money = dict(self.payments[payment_id].data["amount_money"])
        refund = {"id": secrets.token_hex(12), "payment_id": payment_id, "amount_money": money}
        refund |= {"status": "COMPLETED", "reason": "requested_by_customer"}
        event = self.webhooks.square_event("refund.updated", "refund", refund)
        self.webhooks.emit(event, delay)
        return event

    def dispute(self, payment_id: str, *, delay: float | None = None) -> JsonDict:
        money = dict(self.payments[payment_id].data["amount_money"])
        dispute = {"id": secrets.token_hex(12), "amount_money": money, "reason": "NOT_AS_DESCRIBED"}
        dispute |= {"state": "EVIDENCE_REQUIRED", "disputed_payment": {"payment_id": payment_id}}
        event = self.webhooks.square_event("dispute.created", "dispute", dispute)
        self.webhooks.emit(event, delay)
        return event

    def remove(self, payment_id: str) -> None:
        """Deletes a payment from every read, as if removed behind the gateway's back."""
        del self.payments[payment_id]
