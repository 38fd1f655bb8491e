"""A real `effectgate serve` child process in front of a Stripe simulator, for the agent-framework
tests (MCP, LangGraph, OpenAI Agents): two tenants, each with one token."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effectgate.client import EffectGateClient
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.chaos.config_writer import toml_value, write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import GatewayProcess, config_doc, stripe_tools

ACME_TOKEN, GLOBEX_TOKEN = "acme-agent-token-1", "globex-agent-token-2"


def _principal(name: str, tenant: str, token: str) -> dict[str, Any]:
    digest = hashlib.sha256(token.encode()).hexdigest()
    return {"name": name, "tenant": tenant, "token_sha256": digest, "roles": ["agent", "operator"]}


PRINCIPALS = [_principal("acme-bot", "acme", ACME_TOKEN), _principal("globex-bot", "globex", GLOBEX_TOKEN)]


@dataclass
class RunningGateway:
    process: GatewayProcess
    config: Path
    sim: StripeSimulator

    @property
    def target(self) -> str:
        return self.process.target

    def client(self, token: str = ACME_TOKEN) -> EffectGateClient:
        return EffectGateClient.connect(self.target, token=token)

    async def actions(self, token: str = ACME_TOKEN) -> list[pb.Action]:
        client = self.client(token)
        try:
            listed = await client.stub.ListActions(pb.ListActionsRequest(page_size=100), metadata=client.metadata)
            return list(listed.actions)
        finally:
            await client.close()

    async def approve(self, action_id: str, token: str = ACME_TOKEN) -> pb.Action:
        client = self.client(token)
        try:
            approved: pb.Action = await client.operator.Approve(
                pb.ApproveRequest(action_id=action_id, note="approved in a test"), metadata=client.metadata
            )
            return approved
        finally:
            await client.close()

    def effects(self) -> list[dict[str, Any]]:
        return list(self.sim.ledger)


@asynccontextmanager
async def running_gateway(
    tmp_path: Path,
    sim: StripeSimulator,
    *,
    mcp: Mapping[str, Any] | None = None,
    dev_mode: bool = False,
    gateway: Mapping[str, Any] | None = None,
    **tool: Any,
) -> AsyncIterator[RunningGateway]:
    """With `dev_mode`, no principals: any caller is tenant `dev` (no token needed); `gateway`
    overrides keys of the `[gateway]` table (e.g. a longer lease for a slow provider)."""
    principals = None if dev_mode else PRINCIPALS
    doc = config_doc(
        f"sqlite:///{tmp_path}/eg.db", principals=principals, gateway=gateway, **stripe_tools(sim.base_url, **tool)
    )
    path = write_config(doc, tmp_path / "effectgate.toml")
    if mcp:
        # The front door's own table; the gateway ignores it.
        path.write_text(path.read_text() + "\n[mcp]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in mcp.items()))
    process = GatewayProcess(path)
    try:
        await process.ready()
        yield RunningGateway(process, path, sim)
    finally:
        assert await process.stop() == 0, "".join(process.output)
