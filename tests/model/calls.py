"""The doors the machine knocks on, each turned into an `Answer`: the agent's Execute, the
operators' calls through the real client, and webhook deliveries to the real listener."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable
from typing import Any

import grpc
import httpx

from effectgate.client import EffectGateClient, EffectGateError, RunContext
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.webhook_sender import stripe_signature
from tests.model.expect import Answer, Key

CARDS = ("pm_card_visa", "pm_card_visa", "pm_card_chargeDeclined")


def payload(amount: int, card: str = "pm_card_visa") -> ChargeCard:
    return ChargeCard(customer="cus_model", amount=amount, currency="usd", payment_method=card)


async def answered(call: Awaitable[Any]) -> Answer:
    try:
        result = await call
    except EffectGateError as error:
        return Answer(error.code(), error.reason, None, False, tuple(sorted(error.metadata.items())))
    except grpc.aio.AioRpcError as error:
        return Answer(error.code(), "")
    if isinstance(result, pb.ExecuteResponse):
        return Answer(grpc.StatusCode.OK, "", result.action, result.replayed)
    if isinstance(result, pb.Action):
        return Answer(grpc.StatusCode.OK, "", result)
    return Answer(grpc.StatusCode.OK, "", getattr(result, "action", None))


async def execute(
    client: EffectGateClient, key: Key, amount: int, card: str, *, agent: str = "", bypass: bool = False
) -> Answer:
    context = RunContext(run_id=key.run, step_id=key.step, agent=agent)
    call = client.execute(key.tool, payload(amount, card), scope=key.scope, context=context, timeout=8, bypass=bypass)
    return await answered(call)


async def actions(client: EffectGateClient) -> dict[str, pb.Action]:
    """Every action of the tenant, by id (an observer's ListActions)."""
    found: dict[str, pb.Action] = {}
    async for action in client.list():
        found[action.action_id] = action
    return found


async def deliver(
    http: httpx.AsyncClient, port: int, adapter: str, body: bytes, secret: str
) -> tuple[int, dict[str, Any]]:
    """One signed POST to the gateway's webhook listener, as the provider sends it."""
    headers = {"Stripe-Signature": stripe_signature(body, secret), "Content-Type": "application/json"}
    reply = await http.post(f"http://127.0.0.1:{port}/webhooks/{adapter}", content=body, headers=headers)
    try:
        answer = reply.json()
    except ValueError:
        answer = {}
    return reply.status_code, answer if isinstance(answer, dict) else {}


def event(event_type: str, intent: dict[str, Any], event_id: str) -> bytes:
    return json.dumps(
        {
            "id": event_id,
            "object": "event",
            "type": event_type,
            "created": int(time.time()),
            "livemode": False,
            "api_version": "2024-06-20",
            "data": {"object": intent},
        }
    ).encode()
