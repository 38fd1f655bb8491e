"""What the effect protocol holds (store, tools, driver, limits, clock, replay cache, the drives
and claims in flight) and what every one of its verbs uses: the store guard, the tool's policy,
the read of a record that must exist, the skew check and the small accessors the RPC layer,
operators and the reconciler read.

`EffectProtocol` is built in layers, each using only what is below it: these parts, the lease
verbs (`leases`), the read verbs (`reads`) and the Execute path (`execute`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from effectgate.adapters.base import KEEPS_PROCESSING
from effectgate.gateway.config import ToolConfig
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.limits.gate import LimitGate
from effectgate.gateway.core.observer import INSTALLED
from effectgate.gateway.core.protocol.driver import Driver, DriverSettings, policy_of
from effectgate.gateway.core.protocol.replay_cache import ReplayCache, Serializer
from effectgate.gateway.core.tools import BoundTool, ToolSet
from effectgate.gateway.model import (
    ActionNotFound,
    ActionRecord,
    ClockSkewed,
    GatewayUnavailable,
    InvalidRequest,
    Notice,
)
from effectgate.gateway.store import Store, StoreUnavailable

T = TypeVar("T")


class ProtocolParts:
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
    ) -> None:
        self._store = store
        self._tools = tools
        self._settings = settings
        self._clock = clock
        self._sleep = sleep
        # "" while this replica's clock may be trusted (store.clock.skew_problem), else why not:
        # then it claims nothing and sends nothing (docs/protocol.md, "Clocks").
        self._clock_problem = clock_problem
        self._limits = LimitGate(store, tools, clock)
        self._driver = Driver(
            store,
            settings,
            clock=clock,
            sleep=sleep,
            clock_problem=clock_problem,
            gate=self._limits,
            on_answered=on_answered,
        )
        self._cache = cache if cache is not None else ReplayCache()
        # Drives running in this process, by action id: local duplicates await them, and
        # graceful shutdown lets them finish.
        self._inflight: dict[str, asyncio.Task[ActionRecord]] = {}
        # Claims being inserted by this process (see `EffectProtocol._claim`).
        self._claiming: dict[str, asyncio.Future[None]] = {}
        # Set when work appears for the reconciler (an approval, a parked action).
        self._work_ready = asyncio.Event()

    # -- small verbs for the RPC layer, operators and the reconciler ------------------------------

    def post_notices(self, post: Callable[[Notice], None]) -> None:
        """Where limit denials and breaker openings go ([[notify]]); `post` must not block."""
        self._limits.on_notice = post

    def refuse_if_skewed(self) -> None:
        """Raises ClockSkewed while this replica's clock is too far from the store's."""
        problem = self._clock_problem()
        if problem:
            raise ClockSkewed(f"{problem}: this replica takes no work until it is back; another replica may")

    def now(self) -> float:
        """The protocol's clock (the reconciler measures its lag with it)."""
        return self._clock()

    def answer_replays_with(self, serialize: Serializer) -> None:
        """How the RPC layer answers a replay of a record (opaque bytes here): made once per kept
        settled action and handed back in `ExecuteResult.answer`."""
        self._cache.answer_with(serialize)

    def tool_deadline(self, tool: str) -> float:
        """The tool's default budget of one Execute (when the caller sets no deadline)."""
        return self._tools.get(tool).config.deadline

    def tool_config(self, tool: str) -> ToolConfig:
        return self._tools.get(tool).config

    def approvals_required(self, tool: str) -> int:
        """How many people must approve an action of `tool` (0 for a tool since removed from the
        config): what every answer showing an action to a person says."""
        try:
            return self._tools.get(tool).config.approvals
        except InvalidRequest:
            return 0

    def tool(self, name: str) -> BoundTool:
        return self._tools.get(name)

    # -- helpers -------------------------------------------------------------------------------

    def _policy(self, tool: BoundTool) -> t.Policy:
        return policy_of(tool, self._settings)

    def _policy_of_record(self, record: ActionRecord) -> t.Policy:
        try:
            return self._policy(self._tools.get(record.tool))
        except InvalidRequest:  # a tool since removed from the config: operators still settle it
            s = self._settings
            return t.Policy(
                s.lease_ttl, s.recheck_min, s.recheck_max, consistency_window=0.0, keeps_processing=KEEPS_PROCESSING
            )

    async def _get(self, action_id: str) -> ActionRecord:
        record = await self._guard(self._store.get(action_id))
        if record is None:
            raise ActionNotFound(action_id)
        return record

    @staticmethod
    async def _guard(work: Awaitable[T]) -> T:
        """A store that cannot persist fails the call closed: nothing more is sent."""
        try:
            return await work
        except StoreUnavailable as exc:
            INSTALLED.observer.store_error("protocol")
            raise GatewayUnavailable(str(exc)) from exc
