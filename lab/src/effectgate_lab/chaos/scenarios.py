"""The four tasks: how the agent writes each one, how it reaches the provider without effectgate,
how effectgate is configured for it, and the ground truth read from the simulator.

Arguments come in two shapes: as the model wrote them (`args`, which a re-planning model may
paraphrase: `12` vs `"12.00"` dollars, `USD` vs `usd`, spacing) and as the agent's typed tool
schema converts them for the provider (`typed`). Paraphrases never change what the user asked for.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar, Protocol

import httpx
from google.protobuf import struct_pb2
from google.protobuf.message import Message

from effectgate.tools.v1 import tools_pb2
from effectgate_lab.chaos.model import HTTP_TIMEOUT, Truth
from effectgate_lab.simulators.crm_sim import CrmSimulator
from effectgate_lab.simulators.faults import FaultInjector, FaultPlan
from effectgate_lab.simulators.postmark_sim import PostmarkSimulator
from effectgate_lab.simulators.server import SimulatorServer
from effectgate_lab.simulators.stripe_sim import StripeSimulator

# One loopback-only test secret for every simulator, handed to adapters through the environment.
SECRET_ENV = "EFFECTGATE_CHAOS_KEY"
SECRET = "sk_test_chaos_harness_only"
os.environ.setdefault(SECRET_ENV, SECRET)
TAG_KEY = "chaos_tag"  # metadata the direct and wrapper callers attach (the wrapper searches it)
JsonDict = dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """A provider's HTTP answer; `status` None means the request left and no answer came."""

    status: int | None
    body: Any = None


class Provider(Protocol):
    """A simulated provider of one episode: its fault decisions, its address, its life."""

    injector: FaultInjector
    base_url: str

    async def start(self) -> str: ...

    async def stop(self) -> None: ...


class Check:
    TRUE, FALSE, UNKNOWN = "true", "false", "unknown"


def cents(amount: object) -> int:
    return int(Decimal(str(amount)) * 100)


def struct(values: Mapping[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(dict(values))
    return out


def _field(reply: Reply, name: str) -> Any:
    return reply.body.get(name) if isinstance(reply.body, dict) else None


async def request(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> Reply:
    try:
        resp = await client.request(method, url, **kwargs)
    except httpx.HTTPError:
        return Reply(None)
    try:
        body = resp.json()
    except ValueError:
        body = None
    return Reply(resp.status_code, body)


class Scenario(ABC):
    name: ClassVar[str]
    tool_kind: ClassVar[str]  # the adapter kind effectgate uses
    call_timeout: ClassVar[float] = HTTP_TIMEOUT  # how long any method waits for one provider call

    @abstractmethod
    def make_sim(self, plan: FaultPlan, settle: float | None, lag: float) -> Provider: ...

    @abstractmethod
    def args(self, seed: int, paraphrased: bool) -> JsonDict:
        """The tool-call arguments as the model writes them."""

    @abstractmethod
    def typed(self, args: JsonDict) -> JsonDict:
        """The agent's tool schema: provider units and casing."""

    @abstractmethod
    async def send(self, client: httpx.AsyncClient, typed: JsonDict, key: str | None, tag: str) -> Reply:
        """One provider write, as an agent without effectgate makes it."""

    @abstractmethod
    async def check(self, client: httpx.AsyncClient, typed: JsonDict, tag: str) -> str:
        """The wrapper's postcondition read: Check.TRUE / FALSE / UNKNOWN."""

    @abstractmethod
    def half_done(self, reply: Reply) -> bool:
        """A 2xx answer that shows only part of the effect (the study's "partial success")."""

    @abstractmethod
    def adapter(self, base_url: str, window: float) -> JsonDict:
        """effectgate's `[adapters.*]` table for this provider, with its consistency window."""

    @abstractmethod
    def payload(self, typed: JsonDict) -> Message: ...

    @abstractmethod
    def scope(self, typed: JsonDict) -> str: ...

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {SECRET}"}

    def truth(self, sim: Provider) -> Truth:
        """Every applied write is an effect; a partial one is whole only if the provider finishes it."""
        assert isinstance(sim, SimulatorServer)
        settles = getattr(sim, "settle_seconds", None) is not None
        whole = [e for e in sim.ledger if e.get("fault") != "partial" or settles]
        return Truth(len(sim.ledger), len(whole))


class ChargeCard(Scenario):
    name = "charge_card"
    tool_kind = "stripe"

    def make_sim(self, plan: FaultPlan, settle: float | None, lag: float) -> Provider:
        # Stripe's `processing` intents always settle: that is how Stripe behaves.
        return StripeSimulator(api_key=SECRET, faults=plan, visibility_lag=lag, settle_seconds=settle or lag)

    def args(self, seed: int, paraphrased: bool) -> JsonDict:
        dollars = 10 + seed % 7
        return {
            "customer": f"cus_{seed}",
            "amount": f"{dollars}.00" if paraphrased else dollars,
            "currency": "usd" if paraphrased else "USD",
        }

    def typed(self, args: JsonDict) -> JsonDict:
        return {"customer": args["customer"], "amount": cents(args["amount"]), "currency": args["currency"].lower()}

    async def send(self, client: httpx.AsyncClient, typed: JsonDict, key: str | None, tag: str) -> Reply:
        form = {
            "amount": str(typed["amount"]),
            "currency": typed["currency"],
            "customer": typed["customer"],
            "payment_method": "pm_card_visa",
            "confirm": "true",
            f"metadata[{TAG_KEY}]": tag,
        }
        headers = {"Idempotency-Key": key} if key else {}
        return await request(client, "POST", "/v1/payment_intents", data=form, headers=headers)

    async def check(self, client: httpx.AsyncClient, typed: JsonDict, tag: str) -> str:
        # Existence of an intent carrying the key: Stripe search, eventually consistent.
        reply = await request(
            client, "GET", "/v1/payment_intents/search", params={"query": f"metadata['{TAG_KEY}']:'{tag}'"}
        )
        if reply.status != 200 or not isinstance(reply.body, dict):
            return Check.UNKNOWN
        return Check.TRUE if reply.body.get("data") else Check.FALSE

    def half_done(self, reply: Reply) -> bool:
        return bool(_field(reply, "status") == "processing")

    def adapter(self, base_url: str, window: float) -> JsonDict:
        return {
            "kind": "stripe",
            "api_base": base_url,
            "api_key_env": SECRET_ENV,
            "timeout": HTTP_TIMEOUT,
            "consistency_window": window,
        }

    def payload(self, typed: JsonDict) -> Message:
        return tools_pb2.ChargeCard(
            customer=typed["customer"],
            amount=typed["amount"],
            currency=typed["currency"],
            payment_method="pm_card_visa",
        )

    def scope(self, typed: JsonDict) -> str:
        return f"order:{typed['customer']}"


class SendEmail(Scenario):
    name = "send_email"
    tool_kind = "postmark"

    def make_sim(self, plan: FaultPlan, settle: float | None, lag: float) -> Provider:
        return PostmarkSimulator(server_token=SECRET, faults=plan, visibility_lag=lag, settle_seconds=settle)

    def headers(self) -> dict[str, str]:
        return {"X-Postmark-Server-Token": SECRET}

    def args(self, seed: int, paraphrased: bool) -> JsonDict:
        if paraphrased:  # the same message, spaced and broken into lines differently
            return {
                "to": f" customer{seed}@example.com",
                "subject": f"Your order {seed}  has shipped ",
                "text": f"Hello,\r\nyour order {seed} is on its way.\r\n",
            }
        return {
            "to": f"customer{seed}@example.com",
            "subject": f"Your order {seed} has shipped",
            "text": f"Hello,\nyour order {seed} is on its way.\n",
        }

    def typed(self, args: JsonDict) -> JsonDict:
        return {"from": "shop@example.com", **args}

    async def send(self, client: httpx.AsyncClient, typed: JsonDict, key: str | None, tag: str) -> Reply:
        body = {
            "From": typed["from"],
            "To": typed["to"].strip(),
            "Subject": typed["subject"],
            "TextBody": typed["text"],
            "Metadata": {TAG_KEY: tag},
        }
        # Postmark has no idempotency key: `key` has nowhere to go.
        return await request(client, "POST", "/email", json=body)

    async def check(self, client: httpx.AsyncClient, typed: JsonDict, tag: str) -> str:
        params = {"count": "50", "offset": "0", f"metadata_{TAG_KEY}": tag}
        reply = await request(client, "GET", "/messages/outbound", params=params)
        if reply.status != 200 or not isinstance(reply.body, dict):
            return Check.UNKNOWN
        return Check.TRUE if reply.body.get("TotalCount") else Check.FALSE

    def half_done(self, reply: Reply) -> bool:
        return bool(_field(reply, "Message") == "Queued")

    def adapter(self, base_url: str, window: float) -> JsonDict:
        return {
            "kind": "postmark",
            "base_url": base_url,
            "server_token_env": SECRET_ENV,
            "timeout": HTTP_TIMEOUT,
            "consistency_window": window,
        }

    def payload(self, typed: JsonDict) -> Message:
        msg = tools_pb2.SendEmail(to=typed["to"], subject=typed["subject"], text=typed["text"])
        setattr(msg, "from", typed["from"])  # `from` is a Python keyword
        return msg

    def scope(self, typed: JsonDict) -> str:
        return f"email:{typed['to'].strip()}"


def crm_adapter(base_url: str, window: float, request: JsonDict, verify: JsonDict, expect: list[JsonDict]) -> JsonDict:
    """A generic HTTP adapter table for the CRM (docs/examples/crm-http-adapters.toml)."""
    return {
        "kind": "http",
        "base_url": base_url,
        "token_env": SECRET_ENV,
        "timeout": HTTP_TIMEOUT,
        "consistency_window": window,
        "definitive_statuses": [400, 404, 422],
        "request": request,
        "response_expect": expect,
        "verify": verify,
        "expect": expect,
    }


class ActivateCustomer(Scenario):
    name = "activate_customer"
    tool_kind = "http"

    def make_sim(self, plan: FaultPlan, settle: float | None, lag: float) -> Provider:
        return CrmSimulator(api_key=SECRET, faults=plan, visibility_lag=lag, settle_seconds=settle)

    def args(self, seed: int, paraphrased: bool) -> JsonDict:
        return {"customer": f"cus_{seed}a", "seats": 5.0 if paraphrased else 5}

    def typed(self, args: JsonDict) -> JsonDict:
        return {"customer": args["customer"], "seats": int(args["seats"])}

    async def send(self, client: httpx.AsyncClient, typed: JsonDict, key: str | None, tag: str) -> Reply:
        # No idempotency key exists at this API.
        return await request(client, "POST", f"/customers/{typed['customer']}/activate")

    async def check(self, client: httpx.AsyncClient, typed: JsonDict, tag: str) -> str:
        # The study's postcondition: status ACTIVE and activated_at set.
        reply = await request(client, "GET", f"/customers/{typed['customer']}")
        if reply.status != 200 or not isinstance(reply.body, dict):
            return Check.UNKNOWN
        done = reply.body.get("status") == "ACTIVE" and reply.body.get("activated_at") is not None
        return Check.TRUE if done else Check.FALSE

    def half_done(self, reply: Reply) -> bool:
        return _field(reply, "activated_at") is None

    def adapter(self, base_url: str, window: float) -> JsonDict:
        table = crm_adapter(
            base_url,
            window,
            {"method": "POST", "url": "/customers/{customer}/activate"},
            {"method": "GET", "url": "/customers/{customer}"},
            [{"path": "status", "equals": "ACTIVE"}, {"path": "activated_at", "present": True}],
        )
        # Absence is an inactive customer; a 404 (no such customer) proves nothing about the write.
        return table | {"absent_when": [{"path": "status", "equals": "INACTIVE"}], "absent_statuses": []}

    def payload(self, typed: JsonDict) -> Message:
        return struct(typed)

    def scope(self, typed: JsonDict) -> str:
        return f"customer:{typed['customer']}"


class RecordInvoice(Scenario):
    name = "record_invoice"
    tool_kind = "http"

    def make_sim(self, plan: FaultPlan, settle: float | None, lag: float) -> Provider:
        return CrmSimulator(api_key=SECRET, faults=plan, visibility_lag=lag, settle_seconds=settle)

    def args(self, seed: int, paraphrased: bool) -> JsonDict:
        dollars = 40 + seed % 9
        return {
            "invoice": f"inv_{seed}",
            "amount": f"{dollars}.00" if paraphrased else dollars,
            "currency": "usd" if paraphrased else "USD",
        }

    def typed(self, args: JsonDict) -> JsonDict:
        return {"id": args["invoice"], "amount": cents(args["amount"]), "currency": args["currency"].lower()}

    async def send(self, client: httpx.AsyncClient, typed: JsonDict, key: str | None, tag: str) -> Reply:
        return await request(client, "POST", "/invoices", content=json.dumps(typed))

    async def check(self, client: httpx.AsyncClient, typed: JsonDict, tag: str) -> str:
        # The study's postcondition: the row exists and its id and amount match.
        reply = await request(client, "GET", f"/invoices/{typed['id']}")
        if reply.status == 404:
            return Check.FALSE
        if reply.status != 200 or not isinstance(reply.body, dict):
            return Check.UNKNOWN
        return Check.TRUE if reply.body.get("amount") == typed["amount"] else Check.FALSE

    def half_done(self, reply: Reply) -> bool:
        return _field(reply, "amount") is None

    def adapter(self, base_url: str, window: float) -> JsonDict:
        return crm_adapter(
            base_url,
            window,
            {
                "method": "POST",
                "url": "/invoices",
                "body": {"id": "{id}", "amount": "{amount}", "currency": "{currency}"},
            },
            {"method": "GET", "url": "/invoices/{id}"},
            [{"path": "id", "equals": "{id}"}, {"path": "amount", "equals": "{amount}"}],
        ) | {"absent_statuses": [404]}  # GET /invoices/{id} answers 404 when no row is visible

    def payload(self, typed: JsonDict) -> Message:
        return struct(typed)

    def scope(self, typed: JsonDict) -> str:
        return f"invoice:{typed['id']}"


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (ChargeCard(), SendEmail(), ActivateCustomer(), RecordInvoice())}
