"""What `make demo` runs: the gateway on SQLite, the Stripe simulator with faults, and a demo agent.

Five user requests, each with the trouble a real agent loop meets: a response lost after the
provider charged, a 500 after the charge, a provider slower than the agent's patience (the model
re-plans with a fresh tool-call id and rewrites the arguments), two subagents that both think
they own the step, and a declined card. The same requests run twice under the same faults:
once with the agent calling the provider directly (idempotency key = its tool-call id), once
through effectgate. The table counts what the provider's ledger really recorded.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx

from effectgate.client import EffectGateClient, run, step, subagent
from effectgate.gateway.config import parse_config
from effectgate.gateway.runtime import Gateway
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator

API_KEY = "sk_test_demo"
PATIENCE = 1.0  # seconds the agent waits for a tool before it re-plans


@dataclass(frozen=True)
class Request:
    title: str
    customer: str
    dollars: str
    fault: str | None
    method: str = "pm_card_visa"
    subagents: int = 1


REQUESTS = [
    Request("response lost after the charge", "cus_ana", "10", "drop_after_commit"),
    Request("500 after the charge", "cus_bo", "25", "error_after_commit"),
    Request("provider slower than the agent", "cus_cy", "40", "slow"),
    Request("two subagents own the step", "cus_di", "15", None, subagents=2),
    Request("card declined", "cus_ed", "30", None, method="pm_card_chargeDeclined"),
]


def to_cents(dollars: str) -> int:
    """The agent's tool schema: the model writes '10' first and '10.00' when it re-plans."""
    return round(float(dollars) * 100)


def effects_for(sim: StripeSimulator, customer: str) -> int:
    return sum(1 for e in sim.ledger if e["params"].get("customer") == customer)


async def direct_agent(sim: StripeSimulator, req: Request) -> str:
    """Calls the provider itself; each (re-planned) tool call brings a fresh key."""
    answer = "error"
    async with httpx.AsyncClient(base_url=sim.base_url, headers={"Authorization": f"Bearer {API_KEY}"}) as http:

        async def call(dollars: str) -> str:
            form = {
                "customer": req.customer,
                "amount": str(to_cents(dollars)),
                "currency": "usd",
                "payment_method": req.method,
                "confirm": "true",
            }
            key = f"call_{uuid.uuid4().hex[:12]}"  # the model's tool-call id
            response = await http.post(
                "/v1/payment_intents", data=form, headers={"Idempotency-Key": key}, timeout=PATIENCE
            )
            return "charged" if response.status_code == 200 else f"http {response.status_code}"

        for dollars in (req.dollars, f"{float(req.dollars):.2f}"):  # first try, then re-plan
            try:
                results = await asyncio.gather(*(call(dollars) for _ in range(req.subagents)))
                answer = results[0]
                if answer in ("charged", "http 402"):
                    break
            except httpx.HTTPError as exc:
                answer = type(exc).__name__
    return answer


async def gateway_agent(client: EffectGateClient, req: Request) -> str:
    """The same loop through effectgate: run and step ids come from the runtime, not the model."""
    answer = "error"
    with run(f"demo-{req.customer}"), step("charge-order"):

        async def call(dollars: str, agent: str) -> pb.ExecuteResponse:
            with subagent(agent):
                payload = ChargeCard(
                    customer=req.customer, amount=to_cents(dollars), currency="USD", payment_method=req.method
                )
                return await client.execute("charge_card", payload, scope=f"order:{req.customer}", timeout=PATIENCE)

        for dollars in (req.dollars, f"{float(req.dollars):.2f}", req.dollars):
            try:
                calls = (call(dollars, f"subagent-{i}") for i in range(req.subagents))
                results = await asyncio.gather(*calls)
                action = results[0].action
                answer = pb.EffectState.Name(action.state).removeprefix("EFFECT_STATE_")
                if action.state in (pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED):
                    break
            except grpc.aio.AioRpcError as exc:
                answer = exc.code().name
            await asyncio.sleep(0.5)  # the model thinks, then re-plans
    return answer


async def _round(sim: StripeSimulator, agent: Callable[[Request], Awaitable[str]]) -> list[tuple[str, int]]:
    rows = []
    for req in REQUESTS:
        sim.injector.script([req.fault] if req.fault else [])
        sim.injector.configure(sim.injector.plan)
        rows.append((await agent(req), effects_for(sim, req.customer)))
    return rows


async def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ["DEMO_STRIPE_KEY"] = API_KEY
    # The store lives for this run only: the folder goes when the demo ends, Ctrl-C included.
    with tempfile.TemporaryDirectory(prefix="effectgate-demo-") as folder:
        sim = StripeSimulator(api_key=API_KEY, search_lag=0.4)
        await sim.start()
        try:
            await _demo(sim, Path(folder))
        finally:
            await sim.stop()


async def _demo(sim: StripeSimulator, workdir: Path) -> None:
    print(f"Stripe simulator   {sim.base_url}")
    direct = await _round(sim, lambda r: direct_agent(sim, r))
    sim.reset()

    config = parse_config(
        {
            "server": {"listen": "127.0.0.1:0"},
            "store": {"url": f"sqlite:///{workdir}/effectgate.db"},
            "gateway": {"lease_ttl": "5s", "reconcile_interval": "0.5s", "recheck_min": "0.5s"},
            "adapters": {"stripe": {"api_base": sim.base_url, "api_key_env": "DEMO_STRIPE_KEY"}},
            "tools": {"charge_card": {"adapter": "stripe", "consistency_window": "1s", "attempt_timeout": "3s"}},
        }
    )
    gateway = await Gateway.start(config)
    try:
        print(f"effectgate gateway 127.0.0.1:{gateway.port}  (SQLite, removed when the demo ends)\n")
        client = EffectGateClient.connect(f"127.0.0.1:{gateway.port}")
        try:
            await _through_the_gateway(sim, client, direct)
        finally:
            await client.close()
    finally:
        await gateway.stop()


async def _through_the_gateway(sim: StripeSimulator, client: EffectGateClient, direct: list[tuple[str, int]]) -> None:
    started = time.monotonic()
    through = await _round(sim, lambda r: gateway_agent(client, r))
    await asyncio.sleep(1.5)  # let the reconciler settle anything left UNKNOWN
    through = [(answer, effects_for(sim, req.customer)) for req, (answer, _) in zip(REQUESTS, through, strict=True)]

    header = f"{'user request':32} {'direct: told':13} {'effects':>7}      {'effectgate: told':17} {'effects':>7}"
    print(header)
    print("-" * len(header))
    for req, (d_answer, d_effects), (g_answer, g_effects) in zip(REQUESTS, direct, through, strict=True):
        want = 0 if "declined" in req.title else 1
        d_mark = "   " if d_effects == want else " !!"
        g_mark = "" if g_effects == want else " !!"
        print(f"{req.title:32} {d_answer:13} {d_effects:>7}{d_mark}   {g_answer:17} {g_effects:>7}{g_mark}")
    print(
        f"\n!! = not the one effect the user asked for (0 for the declined card). "
        f"Gateway round took {time.monotonic() - started:.1f}s."
    )
    actions = await client.stub.ListActions(pb.ListActionsRequest())
    print("\nactions kept by the gateway:")
    for action in actions.actions:
        state = pb.EffectState.Name(action.state).removeprefix("EFFECT_STATE_")
        print(
            f"  {action.action_id}  {state:17} attempts={action.attempts}"
            f"  receipt={action.receipt.external_id or '-':28} {action.reason}"
        )
