"""A protocol wired on the kit's clock, adapter and store, for in-process tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message

from effectgate.gateway.background import Reconciler
from effectgate.gateway.config import ToolConfig
from effectgate.gateway.core import (
    BoundTool,
    Collaborators,
    DriverSettings,
    EffectProtocol,
    ExecuteCommand,
    ExecuteResult,
    Operations,
    Policy,
    ReplayCache,
    ToolSet,
    policy_of,
)
from effectgate.gateway.model import ActionIdentity, ActionRecord
from effectgate.gateway.runtime import GatewayObserver
from effectgate.testing.adapter import ScriptedAdapter
from effectgate.testing.clock import FakeClock
from effectgate.testing.store import MemoryDatabase, MemoryStore
from effectgate.tools.v1 import tools_pb2

CHARGE = tools_pb2.ChargeCard(customer="cus_42", amount=1000, currency="usd", payment_method="pm_card_visa")
TOOL = "charge_card"
TENANT = "acme"


def command(
    run: str = "run-1",
    step: str = "charge",
    scope: str = "order:1",
    *,
    payload: Message = CHARGE,
    bypass: bool = False,
    call: str = "call-1",
    tenant: str = TENANT,
) -> ExecuteCommand:
    """An Execute of the `charge_card` tool (the `CHARGE` payload unless given)."""
    return ExecuteCommand(
        identity=ActionIdentity(tenant, run, step, TOOL, scope, tool_call_id=call),
        payload_type_url=f"type.googleapis.com/{payload.DESCRIPTOR.full_name}",
        payload=payload.SerializeToString(),
        bypass=bypass,
    )


@dataclass
class Rig:
    """The parts of one in-process "gateway" without gRPC; `rig()` builds one."""

    clock: FakeClock
    adapter: ScriptedAdapter
    store: MemoryStore
    protocol: EffectProtocol
    operations: Operations
    reconciler: Reconciler
    tool: ToolConfig
    settings: DriverSettings
    cache: ReplayCache = field(default_factory=ReplayCache)

    @property
    def policy(self) -> Policy:
        return policy_of(BoundTool(self.tool, self.adapter), self.settings)

    @property
    def db(self) -> MemoryDatabase:
        return self.store.db

    async def execute(self, cmd: ExecuteCommand | None = None, *, budget: float | None = None) -> ExecuteResult:
        """One Execute with `budget` virtual seconds (the tool's deadline by default)."""
        deadline = self.clock() + (self.tool.deadline if budget is None else budget)
        return await self.protocol.execute(cmd or command(), deadline)

    def stored(self, action_id: str) -> ActionRecord:
        record = self.db.record(action_id)
        assert record is not None, f"{action_id} is not stored"
        return record

    async def replica(self, owner: str) -> Rig:
        """Another gateway process on the same store, adapter and clock."""
        return await rig(owner=owner, clock=self.clock, adapter=self.adapter, db=self.db, tool=self.tool)


async def rig(
    *,
    owner: str = "worker-1",
    clock: FakeClock | None = None,
    adapter: ScriptedAdapter | None = None,
    db: MemoryDatabase | None = None,
    tool: ToolConfig | None = None,
    lease_ttl: float = 30.0,
    recheck_min: float = 2.0,
    recheck_max: float = 3600.0,
    **tool_settings: Any,
) -> Rig:
    """A protocol on a FakeClock, a ScriptedAdapter and a MemoryStore (each new unless given),
    serving the `charge_card` tool; `tool_settings` are its `[tools.charge_card]` keys."""
    clock = clock or FakeClock()
    adapter = adapter or ScriptedAdapter(clock)
    if tool is None:
        tool = ToolConfig(
            **{"name": TOOL, "adapter": "scripted", "attempt_timeout": 5.0, "deadline": 30.0, **tool_settings}
        )
    store = MemoryStore(db)
    await store.open()
    driver_settings = DriverSettings(owner=owner, lease_ttl=lease_ttl, recheck_min=recheck_min, recheck_max=recheck_max)
    cache = ReplayCache(clock=clock)
    tools = ToolSet({TOOL: BoundTool(tool, adapter)})
    # Spans, metrics and audit lines, as in the gateway.
    parts = Collaborators(
        store, tools, driver_settings, clock=clock, sleep=clock.sleep, cache=cache, observer=GatewayObserver()
    )
    protocol = EffectProtocol(parts)
    return Rig(
        clock=clock,
        adapter=adapter,
        store=store,
        protocol=protocol,
        operations=Operations(protocol),
        reconciler=Reconciler(protocol, interval=1.0),
        tool=tool,
        settings=driver_settings,
        cache=cache,
    )
