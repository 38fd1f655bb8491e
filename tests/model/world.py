"""The world the model machine drives: one Stripe simulator (the provider, with scripted faults and
its ledger, the only place effects are counted), a FakeClock, and one or two real in-process
gateways (the kit's `gateway()`: a grpc.aio server on port 0, the webhook listener) on one store
that outlives them (a SQLite file, or a PostgreSQL database shared by two gateways).

The gateways serve two Stripe adapters on the same simulator (`stripe`, `stripe_b`, each with its
own webhook secret) and three tools: `charge` (limits: a window budget, effects per window and per
run; operator bypass), `charge_approved` (two approvals of three operators, with a TTL) and
`charge_once` (`unique = "scope"`). `variant` 0/1 is the policy a reload switches between.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from effectgate.adapters.stripe.adapter import StripeAdapter
from effectgate.client import EffectGateClient
from effectgate.gateway.runtime.configured import close_adapters
from effectgate.gateway.store import open_store
from effectgate.testing import FakeClock, InProcessGateway, gateway
from effectgate_lab.simulators.stripe_sim import StripeSimulator

T = TypeVar("T")

API_KEY = "sk_test_effectgate_model"
TENANT = "acme"
SECRETS = {"stripe": "whsec_model_stripe_a", "stripe_b": "whsec_model_stripe_b"}
TOKENS = {name: f"token-model-{name}-0123456789" for name in ("agent", "op1", "op2", "op3")}
OPERATORS = ("op1", "op2", "op3")
CONSISTENCY_WINDOW = 2.0
LEASE_TTL = 6.0
APPROVALS = 2
LIMIT_WINDOW = 3600.0
# Per policy variant (a reload switches): the approval TTL and the limits of `charge`.
VARIANTS: tuple[dict[str, Any], ...] = (
    {"approval_ttl": 600.0, "budget": 6000, "max_effects": 5, "run_max_effects": 3},
    {"approval_ttl": 900.0, "budget": 4000, "max_effects": 4, "run_max_effects": 2},
)
# The most any variant lets through: what the provider may ever see, grants aside.
MAX_BUDGET = max(v["budget"] for v in VARIANTS)
MAX_EFFECTS = max(v["max_effects"] for v in VARIANTS)
MAX_RUN_EFFECTS = max(v["run_max_effects"] for v in VARIANTS)
TOOL_ADAPTER = {"charge": "stripe", "charge_approved": "stripe", "charge_once": "stripe_b"}


def tools(variant: int) -> dict[str, dict[str, Any]]:
    v = VARIANTS[variant]
    common = {"consistency_window": f"{CONSISTENCY_WINDOW}s", "attempt_timeout": "3s", "deadline": "10s"}
    return {
        "charge": {
            **common,
            "adapter": "stripe",
            "bypass": "operator",
            "limits": {
                "window": f"{LIMIT_WINDOW}s",
                "budget": {"usd": v["budget"]},
                "max_effects": v["max_effects"],
                "run_max_effects": v["run_max_effects"],
            },
        },
        "charge_approved": {
            **common,
            "adapter": "stripe",
            "approval": "required",
            "approvals": APPROVALS,
            "approval_ttl": f"{v['approval_ttl']}s",
        },
        "charge_once": {**common, "adapter": "stripe_b", "bypass": "operator", "limits": {"unique": "scope"}},
    }


def principals() -> list[dict[str, Any]]:
    def one(name: str, roles: list[str]) -> dict[str, Any]:
        digest = hashlib.sha256(TOKENS[name].encode()).hexdigest()
        return {"name": name, "tenant": TENANT, "token_sha256": digest, "roles": roles}

    return [one("agent", ["agent"]), *(one(op, ["operator", "observer"]) for op in OPERATORS)]


@dataclass
class Replica:
    """One running gateway and a client per principal."""

    gw: InProcessGateway
    stack: AsyncExitStack
    clients: dict[str, EffectGateClient] = field(default_factory=dict)

    @property
    def webhook_port(self) -> int:
        return self.gw.server.webhook_port


async def _http_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=10.0)


class World:
    """Owns the event loop every rule runs on. The loop, the simulator and the webhook client are
    made once per process and reset for each example (`World.fresh`); gateways are per example."""

    _shared: World | None = None

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.sim = StripeSimulator(api_key=API_KEY, settle_seconds=0.0)
        self.run(self.sim.start())
        self.http = self.run(_http_client())  # the webhook deliveries' (the provider's) client
        self.store_url = ""  # set before `start`
        self.replica_count = 1
        self.clock = FakeClock(time.time())
        self.variant = 0
        self.replicas: list[Replica] = []

    @classmethod
    def fresh(cls, replicas: int = 1) -> World:
        world = cls._shared = cls._shared or cls()
        world.sim.reset()
        world.replica_count = replicas
        world.clock = FakeClock(time.time())
        world.variant = 0
        world.replicas = []
        return world

    def run(self, work: Awaitable[T]) -> T:
        return self.loop.run_until_complete(work)

    # -- the gateways -----------------------------------------------------------------------------

    def adapters(self) -> dict[str, StripeAdapter]:
        return {
            name: StripeAdapter(
                name,
                api_key=API_KEY,
                api_base=self.sim.base_url,
                consistency_window=CONSISTENCY_WINDOW,
                timeout=5.0,
                webhook_secrets=[secret],
            )
            for name, secret in SECRETS.items()
        }

    async def start(self) -> None:
        for _ in range(self.replica_count):
            stack = AsyncExitStack()
            gw = await stack.enter_async_context(
                gateway(
                    adapters=self.adapters(),
                    tools=tools(self.variant),
                    store=open_store(self.store_url),
                    clock=self.clock,
                    settings={"lease_ttl": f"{LEASE_TTL}s", "reconcile_interval": "0.5s", "recheck_min": "0.5s"},
                    shutdown_grace=2.0,
                    tables={"principals": principals(), "webhooks": {"listen": "127.0.0.1:0"}},
                )
            )
            replica = Replica(gw, stack)
            for name, token in TOKENS.items():
                client = EffectGateClient(gw.target, token=token, tls=False, ca_file="", cert_file="", key_file="")
                stack.push_async_callback(client.close)
                replica.clients[name] = client
            self.replicas.append(replica)

    async def stop(self, *, crash: bool = False) -> None:
        """Graceful by default; `crash`: the gRPC server drops every call at once (no grace),
        the background jobs are cancelled, and no drain lets in-flight actions finish: what is
        leased and DISPATCHED stays so in the store for the next start."""
        replicas, self.replicas = self.replicas, []
        for replica in replicas:
            if crash:
                await self._crash(replica)
            else:
                await replica.stack.aclose()

    @staticmethod
    async def _crash(replica: Replica) -> None:
        server = replica.gw.server
        replica.stack.pop_all()  # no graceful stop: no drain, no release
        await server.server.stop(0)
        if server.webhooks is not None:
            await server.webhooks.stop()
        await server.background.stop()
        for client in replica.clients.values():
            await client.close()
        await close_adapters(server.adapters)
        await server.store.close()

    async def restart(self, variant: int | None = None) -> None:
        await self.stop(crash=False)
        if variant is not None:
            self.variant = variant
        await self.start()

    def replica(self, index: int) -> Replica:
        return self.replicas[index % len(self.replicas)]

    def client(self, who: str, index: int = 0) -> EffectGateClient:
        return self.replica(index).clients[who]

    # -- background work, on demand -----------------------------------------------------------------

    async def reconcile_pass(self) -> None:
        """One reconciler pass and one approval-expiry pass on every replica, waited for."""
        for replica in self.replicas:
            jobs = replica.gw.server.background.jobs
            await jobs["reconciler"].run()
            close = jobs["reconciler"].close
            if close is not None:
                await close()  # waits for the drives the pass started
            if "approval-expiry" in jobs:
                await jobs["approval-expiry"].run()

    def ledger(self) -> list[dict[str, Any]]:
        return [dict(e) for e in self.sim.ledger if e["kind"] == "payment_intent"]

    def intents(self) -> Iterator[dict[str, Any]]:
        for intent in self.sim.intents.values():
            yield dict(intent.data)

    def close(self) -> None:
        """The example's end: its gateways stop (the simulator stays for the next one)."""
        self.run(self.stop())
