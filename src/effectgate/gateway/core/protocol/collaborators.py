"""The one place that holds what the protocol's verbs and its driver share: the store, the tools,
the lease settings, the clock, the limits, the replay cache and the drives and claims in flight,
with the few helpers every verb uses (the store guard, the tool's policy, the read of a record
that must exist, the skew check).

`EffectProtocol(Collaborators(...))` (`verbs`) hands this one object to each of its parts: the
driver (`driver`), the lease verbs (`leases`), the read verbs (`reads`) and the Execute path
(`execute`). None of them takes the store, the clock or the settings on its own, and this
constructor is the only signature that lists them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from effectgate.adapters.base import KEEPS_PROCESSING
from effectgate.gateway.config import ToolConfig
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.limits.gate import LimitGate
from effectgate.gateway.core.observer import Observer
from effectgate.gateway.core.protocol.replay_cache import ReplayCache, Serializer
from effectgate.gateway.core.tools import BoundTool, ToolSet
from effectgate.gateway.model import (
    ActionNotFound,
    ActionRecord,
    ClockSkewed,
    GatewayUnavailable,
    InvalidRequest,
)
from effectgate.gateway.store import Store, StoreUnavailable

T = TypeVar("T")


@dataclass(frozen=True)
class DriverSettings:
    owner: str
    lease_ttl: float
    recheck_min: float
    recheck_max: float


def policy_of(tool: BoundTool, settings: DriverSettings) -> t.Policy:
    caps = tool.adapter.capabilities
    return t.Policy(
        lease_ttl=settings.lease_ttl,
        recheck_min=settings.recheck_min,
        recheck_max=settings.recheck_max,
        consistency_window=tool.consistency_window,
        attempt_timeout=tool.config.attempt_timeout,
        keeps_processing=tool.keeps_processing,
        has_read_api=caps.has_read_api,
        dedups_on_key=caps.dedups_on_key,
        key_retention=caps.key_retention,
        approvals=tool.config.approvals,
    )


class Collaborators:
    def __init__(
        self,
        store: Store,
        tools: ToolSet,
        settings: DriverSettings,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        cache: ReplayCache | None = None,
        clock_problem: Callable[[], str] = lambda: "",
        on_answered: Callable[[ActionRecord, BoundTool, float], None] | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.store = store
        self.tools = tools
        self.settings = settings
        self.clock = clock
        self.sleep = sleep
        # "" while this replica's clock may be trusted (store.clock.skew_problem), else why not:
        # then it claims nothing and sends nothing (docs/protocol.md, "Clocks").
        self.clock_problem = clock_problem
        # Told of every write the provider answered with a receipt (the read-lag sampler).
        self.on_answered = on_answered
        # This replica's observer: what the core reports (core/observer.py); nothing by default.
        self.observer = observer if observer is not None else Observer()
        self.limits = LimitGate(store, tools, clock, self.observer)
        self.cache = cache if cache is not None else ReplayCache()
        # Drives running in this process, by action id: local duplicates await them, and
        # graceful shutdown lets them finish.
        self.inflight: dict[str, asyncio.Task[ActionRecord]] = {}
        # Claims being inserted by this process (see `ExecutePath._claim`).
        self.claiming: dict[str, asyncio.Future[None]] = {}
        # Set when work appears for the reconciler (an approval, a parked action).
        self.work_ready = asyncio.Event()

    def refuse_if_skewed(self) -> None:
        """Raises ClockSkewed while this replica's clock is too far from the store's."""
        problem = self.clock_problem()
        if problem:
            raise ClockSkewed(f"{problem}: this replica takes no work until it is back; another replica may")

    # -- small verbs, for the RPC layer, operators and the reconciler (bound on the face) --------

    def now(self) -> float:
        """The protocol's clock (the reconciler measures its lag with it)."""
        return self.clock()

    def answer_replays_with(self, serialize: Serializer) -> None:
        """How the RPC layer answers a replay of a record (opaque bytes here): made once per kept
        settled action and handed back in `ExecuteResult.answer`."""
        self.cache.answer_with(serialize)

    def tool_deadline(self, tool: str) -> float:
        """The tool's default budget of one Execute (when the caller sets no deadline)."""
        return self.tools.get(tool).config.deadline

    def tool_config(self, tool: str) -> ToolConfig:
        return self.tools.get(tool).config

    def approvals_required(self, tool: str) -> int:
        """How many people must approve an action of `tool` (0 for a tool since removed from the
        config): what every answer showing an action to a person says."""
        try:
            return self.tools.get(tool).config.approvals
        except InvalidRequest:
            return 0

    def tool(self, name: str) -> BoundTool:
        return self.tools.get(name)

    def policy(self, tool: BoundTool) -> t.Policy:
        return policy_of(tool, self.settings)

    def policy_of_record(self, record: ActionRecord) -> t.Policy:
        try:
            return self.policy(self.tools.get(record.tool))
        except InvalidRequest:  # a tool since removed from the config: operators still settle it
            s = self.settings
            return t.Policy(
                s.lease_ttl, s.recheck_min, s.recheck_max, consistency_window=0.0, keeps_processing=KEEPS_PROCESSING
            )

    async def get(self, action_id: str) -> ActionRecord:
        record = await self.guard(self.store.get(action_id))
        if record is None:
            raise ActionNotFound(action_id)
        return record

    async def guard(self, work: Awaitable[T]) -> T:
        """A store that cannot persist fails the call closed: nothing more is sent."""
        try:
            return await work
        except StoreUnavailable as exc:
            self.observer.store_error("protocol")
            raise GatewayUnavailable(str(exc)) from exc
