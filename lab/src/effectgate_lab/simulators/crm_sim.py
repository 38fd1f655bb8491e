"""A CRM/ledger server with NO idempotency keys: the 2026 study's two tasks.

Endpoints (JSON, `Authorization: Bearer <api_key>`):

    POST /customers/{id}/activate   status := ACTIVE, activated_at := now
    GET  /customers/{id}            the customer as reads see it now
    POST /invoices                  {"id", "amount", "currency"?, "reference"?}: appends an invoice row
                                    (and, with `webhooks` set, sends a signed `invoice.recorded`)
    GET  /invoices/{id}             the first visible row with this id (404 if none)
    GET  /invoices?id=X             {"data": [every visible row with this id]} (a list read:
                                    "no rows" is an empty list, duplicates are all there)

With `echo_credentials`, the simulator plays a careless provider: every answer (200 or error)
carries the caller's `Authorization` value in its JSON body (`"echo"`) and in the `X-Request-Id`
and `X-Echo` headers, so tests can prove the gateway stores and shows none of it.

Nothing is deduplicated: a second POST of the same invoice id appends a second row (the study
counts duplicates, so the simulator must record them rather than refuse them), and every applied
activation is a ledger entry even though activating twice changes nothing more.

Customers exist on first use when their id looks like `cus_<alnum>`; other ids are 404 (a
definitive refusal). An invoice with a non-positive or non-integer amount is a 422.

Faults (see `faults.py`): `partial` applies half the effect: activation sets status ACTIVE but
leaves `activated_at` null; an invoice row is stored without its amount (null). The answer shows
the half-applied resource. With `settle_seconds` set, the missing half lands that much later (a
non-atomic write finishing late, as a Stripe `processing` intent settles); None keeps it half.
`delayed_visibility`: reads (GET) show the write only after the plan's `visibility_lag`; until
then they show the previous state. The injected `conflict` is a 409.

Knobs of a slow, lagging provider (not faults: every write takes them): `write_delay=(low, high)`
holds each write a uniform draw of that many seconds before it lands; `read_lag` keeps every
write out of reads for that long after it landed.

Ledger: `{"kind": "activate_customer" | "invoice", "params", "fault", "at"}`.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from aiohttp import web

from effectgate_lab.simulators.faults import Fault, FaultPlan
from effectgate_lab.simulators.server import JsonDict, SimResponse, SimulatorServer
from effectgate_lab.simulators.webhook_sender import WebhookSender

DEFAULT_API_KEY = "crm-sim-key"
_CUSTOMER_ID = re.compile(r"^cus_[A-Za-z0-9]+$")


@dataclass
class _Version:
    """One state of a record and the time from which reads see it."""

    data: JsonDict | None
    visible_at: float
    # A half-applied write's whole form and when it lands (None: it never does).
    whole: JsonDict | None = None
    whole_at: float = 0.0

    def at(self, now: float) -> JsonDict | None:
        return self.whole if self.whole is not None and now >= self.whole_at else self.data


def _seen(versions: list[_Version], now: float) -> JsonDict | None:
    """The newest version already visible at `now` (None: nothing visible)."""
    visible = [v for v in versions if v.visible_at <= now]
    return visible[-1].at(now) if visible else None


class CrmSimulator(SimulatorServer):
    name: ClassVar[str] = "crm"

    def __init__(
        self,
        *,
        api_key: str = DEFAULT_API_KEY,
        faults: FaultPlan | None = None,
        visibility_lag: float = 5.0,
        latency: float = 0.0,
        settle_seconds: float | None = None,
        echo_credentials: bool = False,
        read_lag: float = 0.0,
        write_delay: tuple[float, float] | None = None,
    ) -> None:
        super().__init__(faults=faults, visibility_lag=visibility_lag, latency=latency)
        self.api_key = api_key
        self.echo_credentials = echo_credentials
        self.settle_seconds = settle_seconds
        # Every write shows in reads only this long after it landed (a lagging read replica).
        self.read_lag = read_lag
        self.write_delay = write_delay
        self.customers: dict[str, list[_Version]] = {}
        # Every invoice row ever written, duplicates included, each with its visibility.
        self.invoices: list[_Version] = []
        # Signed events (`X-Signature: sha256=<HMAC of "timestamp.body">`), sent when a URL and a
        # secret are set: `invoice.recorded` for each invoice row written.
        self.webhooks = WebhookSender(scheme="hmac")

    def reset_state(self) -> None:
        self.customers.clear()
        self.invoices.clear()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/customers/{id}/activate", self._activate)
        app.router.add_get("/customers/{id}", self._get_customer)
        app.router.add_post("/invoices", self._create_invoice)
        app.router.add_get("/invoices/{id}", self._get_invoice)
        app.router.add_get("/invoices", self._list_invoices)

    def middlewares(self) -> list[Any]:
        return [self._echo]

    @web.middleware
    async def _echo(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        response = await handler(request)
        if not self.echo_credentials or request.path.startswith("/_sim/") or not isinstance(response, web.Response):
            return response
        credential = request.headers.get("Authorization", "")
        try:
            body = json.loads(response.text or "null")
        except ValueError:
            body = None
        if isinstance(body, dict):
            body["echo"] = f"you sent {credential}"
            response.text = json.dumps(body)
        response.headers["X-Request-Id"] = f"req {credential}"
        response.headers["X-Echo"] = credential
        return response

    def error_response(self, status: int, code: str, message: str) -> SimResponse:
        return SimResponse(status, {"error": code, "message": message})

    def _authenticate(self, request: web.Request) -> SimResponse | None:
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self.error_response(401, "unauthorized", "Missing or invalid API key.")
        return None

    def _customer(self, customer_id: str) -> list[_Version] | None:
        if not _CUSTOMER_ID.match(customer_id):
            return None
        initial = {"id": customer_id, "status": "INACTIVE", "activated_at": None}
        return self.customers.setdefault(customer_id, [_Version(initial, 0.0)])

    def _half(self, whole: JsonDict, missing: str, fault: Fault | None, now: float) -> _Version:
        """The stored version of a write; a `partial` one lacks `missing` (maybe until it settles)."""
        visible_at = now + self.visibility_delay(fault, self.read_lag)
        if fault is not Fault.PARTIAL:
            return _Version(whole, visible_at)
        half = dict(whole, **{missing: None})
        if self.settle_seconds is None:
            return _Version(half, visible_at)
        return _Version(half, visible_at, whole=whole, whole_at=now + self.settle_seconds)

    # -- customers -----------------------------------------------------------------------------

    def _known_customer(self, request: web.Request, customer_id: str) -> list[_Version] | SimResponse:
        """The customer's versions, or the refusal to answer with (401, then 404)."""
        refused = self._authenticate(request)
        if refused is not None:
            return refused
        versions = self._customer(customer_id)
        if versions is None:
            return self.error_response(404, "not_found", f"No customer {customer_id}.")
        return versions

    async def _activate(self, request: web.Request) -> web.StreamResponse:
        customer_id = request.match_info["id"]
        versions = self._known_customer(request, customer_id)
        if isinstance(versions, SimResponse):
            return self.render(versions)

        async def commit(fault: Fault | None) -> SimResponse:
            now = self.now()
            data = {"id": customer_id, "status": "ACTIVE", "activated_at": now}
            version = self._half(data, "activated_at", fault, now)
            versions.append(version)
            data = version.data or data
            self.record("activate_customer", {"id": customer_id}, fault=fault.value if fault else None)
            return SimResponse(200, dict(data))

        return await self.write(request, commit)

    async def _get_customer(self, request: web.Request) -> web.StreamResponse:
        customer_id = request.match_info["id"]
        versions = self._known_customer(request, customer_id)
        if isinstance(versions, SimResponse):
            return self.render(versions)
        return self.render(SimResponse(200, dict(_seen(versions, self.now()) or {})))

    # -- invoices ------------------------------------------------------------------------------

    def _invoice_body(self, text: str) -> JsonDict | SimResponse:
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = None
        if not isinstance(body, dict) or not str(body.get("id", "")):
            return self.error_response(422, "invalid", "An invoice needs an id.")
        amount = body.get("amount")
        if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
            return self.error_response(422, "invalid", "amount must be a positive integer.")
        parsed = {"id": str(body["id"]), "amount": amount, "currency": str(body.get("currency", "usd"))}
        if isinstance(body.get("reference"), str):  # the caller's own reference, kept on the row
            parsed["reference"] = body["reference"]
        return parsed

    async def _create_invoice(self, request: web.Request) -> web.StreamResponse:
        refused = self._authenticate(request)
        if refused is not None:
            return self.render(refused)
        parsed = self._invoice_body(await request.text())
        if isinstance(parsed, SimResponse):
            return self.render(parsed)
        reference = parsed.pop("reference", None)
        params = parsed

        async def commit(fault: Fault | None) -> SimResponse:
            now = self.now()
            row = dict(params, created_at=now) | ({"reference": reference} if reference else {})
            version = self._half(row, "amount", fault, now)
            self.invoices.append(version)
            self.record("invoice", dict(params), fault=fault.value if fault else None)
            event = {"id": "evt_" + secrets.token_hex(10), "type": "invoice.recorded", "data": dict(version.data or {})}
            self.webhooks.emit(event)
            return SimResponse(201, dict(version.data or {}))

        return await self.write(request, commit)

    async def _get_invoice(self, request: web.Request) -> web.StreamResponse:
        refused = self._authenticate(request)
        if refused is not None:
            return self.render(refused)
        invoice_id = request.match_info["id"]
        now = self.now()
        rows = [row for v in self.invoices if v.visible_at <= now and (row := v.at(now)) and row["id"] == invoice_id]
        if not rows:
            return self.render(self.error_response(404, "not_found", f"No invoice {invoice_id}."))
        # Reads show the first row; `copies` lets a checker see duplicates.
        return self.render(SimResponse(200, dict(rows[0], copies=len(rows))))

    async def _list_invoices(self, request: web.Request) -> web.StreamResponse:
        refused = self._authenticate(request)
        if refused is not None:
            return self.render(refused)
        invoice_id = request.query.get("id", "")
        now = self.now()
        rows = [row for v in self.invoices if v.visible_at <= now and (row := v.at(now)) and row["id"] == invoice_id]
        return self.render(SimResponse(200, {"data": [dict(r) for r in rows]}))
