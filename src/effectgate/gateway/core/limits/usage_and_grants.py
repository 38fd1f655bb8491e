"""What people do with limits (docs/limits.md): read each tool's caps, what the current window
(and a run) has used and what is left; and let one action past them once (a limit grant).

Both read and write through the store's limits (`Store.usage`, `Store.grant_limit`); the grant is
taken by the reservation itself, in the claim's transaction (store/accounting.py)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

from effectgate.gateway.core.limits.policy import ALL
from effectgate.gateway.core.tools import BoundTool, ToolSet
from effectgate.gateway.model import (
    ActionNotFound,
    GatewayUnavailable,
    InvalidRequest,
    LimitGrant,
    LimitUse,
    PolicyConflict,
    State,
    ToolUsage,
)
from effectgate.gateway.store import Store, StoreUnavailable

# How long an unused grant lets its action through: the agent's retry of a refused call comes
# within the run; a grant left lying about should not open the limit days later.
GRANT_TTL = 3600.0
T = TypeVar("T")


async def _guard(work: Awaitable[T]) -> T:
    """A store outage is UNAVAILABLE to the caller (retry), as on every other verb; it reached
    Operator.GrantLimit and GetLimits as an internal error (found by the simulator's operators)."""
    try:
        return await work
    except StoreUnavailable as exc:
        raise GatewayUnavailable(str(exc)) from exc


class LimitsDesk:
    def __init__(self, store: Store, tools: ToolSet, clock: Callable[[], float]) -> None:
        self._store = store
        self._tools = tools
        self._clock = clock

    def counted_tools(self) -> list[str]:
        return sorted(t.name for t in self._tools if t.policy.counted)

    async def usage(self, tenant: str, tool: str = "", run_id: str = "") -> list[ToolUsage]:
        """Each counted tool's caps (or `tool`'s, counted or not) and their use for `tenant` now:
        the window's caps in the current window, the per-run caps for `run_id` (when given)."""
        tools = [self._tools.get(tool)] if tool else [t for t in self._tools if t.policy.counted]
        now = self._clock()
        return [await self._tool_usage(t, tenant, run_id, now) for t in sorted(tools, key=lambda t: t.name)]

    async def _tool_usage(self, tool: BoundTool, tenant: str, run_id: str, now: float) -> ToolUsage:
        limits = tool.config.limits
        start = math.floor(now / limits.window) * limits.window
        rows = await _guard(self._store.usage(tenant, tool.name)) if tool.policy.counted else []
        counters = {(c, b): (e, s) for c, b, e, s in rows}
        found: list[LimitUse] = []
        for key, max_effects, budget, names, run in (
            (f"w:{start:.0f}", limits.max_effects, limits.budget, ("max_effects", "budget"), ""),
            (f"r:{run_id}", limits.run_max_effects, limits.run_budget, ("run_max_effects", "run_budget"), run_id),
        ):
            if key == "r:":  # the per-run caps are shown for a run only
                continue
            if max_effects is not None:
                found.append(LimitUse(names[0], "", max_effects, counters.get((ALL, key), (0, 0))[0], run))
            for currency, cap in sorted(budget.items()):
                found.append(LimitUse(names[1], currency, cap, counters.get((currency, key), (0, 0))[1], run))
        return ToolUsage(tool.name, start, start + limits.window, tuple(found))

    async def grant(self, tenant: str, action_id: str, who: str, note: str) -> LimitGrant:
        """Lets `action_id` past its tool's limits once. The action may not exist yet (a refused
        claim stores nothing) or be NOT_FOUND (its next send is checked again); any other action
        already holds its share, and a second effect is a bypass."""
        if not action_id.startswith("act_"):
            raise InvalidRequest([("action_id", "not an action id (act_...)")])
        if not note.strip():
            raise InvalidRequest([("note", "say why this action may pass the limit")])
        record = await _guard(self._store.get(action_id))
        if record is not None:
            if record.tenant != tenant:
                raise ActionNotFound(action_id)
            if record.state is not State.NOT_FOUND:
                raise PolicyConflict(
                    f"action {action_id} is {record.state.value} and holds its share of the limits already; "
                    "a grant is for a call a limit refused (a second effect needs a bypass)",
                    reason="GRANT_NOT_NEEDED",
                )
        now = self._clock()
        granted = LimitGrant(action_id, tenant, who, note, now, now + GRANT_TTL)
        await _guard(self._store.grant_limit(granted))
        return granted
