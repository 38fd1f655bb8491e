"""The effect protocol's one face, `EffectProtocol`: the verbs the RPC layer, operators, the
reconciler and the server call, and where each one lives.

It is built by composition: one `Collaborators` (`collaborators`: store, tools, lease settings,
clock, limits, replay cache, the drives and claims in flight) handed to the driver (`driver`: write,
call, write), the lease verbs (`leases`), the read verbs (`reads`) and the Execute path
(`execute`). Each verb below is the bound method of the part that holds it, so a call goes
straight there, with no forwarding frame on the hot path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from effectgate.gateway.core.protocol.collaborators import Collaborators, DriverSettings
from effectgate.gateway.core.protocol.driver import Driver
from effectgate.gateway.core.protocol.execute import ExecutePath
from effectgate.gateway.core.protocol.leases import Leases
from effectgate.gateway.core.protocol.reads import Reads
from effectgate.gateway.core.protocol.replay_cache import ReplayCache
from effectgate.gateway.core.tools import BoundTool, ToolSet
from effectgate.gateway.model import ActionRecord
from effectgate.gateway.store import Store


class EffectProtocol:
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
        parts = Collaborators(
            store,
            tools,
            settings,
            clock=clock,
            sleep=sleep,
            cache=cache,
            clock_problem=clock_problem,
            on_answered=on_answered,
        )
        driver = Driver(parts)
        leases = Leases(parts, driver)
        reads = Reads(parts, driver, leases)
        path = ExecutePath(parts, driver, leases)

        # `execute`: the Execute path and the drives this process runs.
        self.execute = path.execute
        self.drive_leased = path.drive_leased
        self.drain = path.drain
        # `reads`: reads for the RPC layer and operators, and the read-backs.
        self.verify = reads.verify
        self.read_object = reads.read_object
        self.peek = reads.peek
        self.get = reads.get
        self.list = reads.list
        self.events = reads.events
        self.history = reads.history
        self.settled_at = reads.settled_at
        self.changes = reads.changes
        self.awaiting = reads.awaiting
        # `leases`: operators' and the reconciler's leases.
        self.try_lease = leases.try_lease
        self.lease = leases.lease
        self.commit = leases.commit
        self.preview = leases.preview
        self.release = leases.release
        self.claim_due = leases.claim_due
        self.wake_reconciler = leases.wake_reconciler
        self.wait_for_work = leases.wait_for_work
        # `collaborators`: the skew check, the clock, the tools' settings and where notices and
        # replays' answers go.
        self.refuse_if_skewed = parts.refuse_if_skewed
        self.now = parts.now
        self.tool = parts.tool
        self.tool_config = parts.tool_config
        self.tool_deadline = parts.tool_deadline
        self.approvals_required = parts.approvals_required
        self.post_notices = parts.post_notices
        self.answer_replays_with = parts.answer_replays_with
