"""Where the effect protocol and the driver meet the limits: a few calls, so that neither grows.

- before anything is stored: the payload bounds, and the action id (`unique = "scope"`);
- for a new action: the breaker, the approval rules on the payload, the reservation taken with
  the claim and the rules on the counters, decided in the claim's transaction (`ruling`);
- for every write of a counted tool: release into UNCOUNTED, hold again on a dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from effectgate.gateway.config import OnUnique, Unique
from effectgate.gateway.core.limits.breaker import Breaker
from effectgate.gateway.core.observer import Observer
from effectgate.gateway.model import (
    UNCOUNTED,
    ActionEvent,
    ActionIdentity,
    ActionRecord,
    Counters,
    InvalidRequest,
    LimitExceeded,
    Reservation,
    Ruling,
    ScopeTaken,
)
from effectgate.gateway.store import Store

if TYPE_CHECKING:
    from effectgate.gateway.core.tools import BoundTool, ToolSet


class LimitGate:
    def __init__(self, store: Store, tools: ToolSet, clock: Callable[[], float], observer: Observer) -> None:
        self._store = store
        self._tools = tools
        self._clock = clock
        # Told of every denial (the limits log, and the [[notify]] notices: background/notify/).
        self._observer = observer
        # The breakers of the tools that configure one (a tool without costs no call).
        self.breakers = {
            t.name: Breaker(t.name, t.config.breaker, clock, observer) for t in tools if t.config.breaker is not None
        }

    # -- the protocol ---------------------------------------------------------------------------

    def action_id(self, tool: BoundTool, who: ActionIdentity, payload: Message) -> str:
        """Checks the payload bounds; the action id (per scope under `unique = "scope"`)."""
        tool.policy.check(who, payload)
        return tool.policy.action_id(who)

    def refuse_repeat(self, tool: BoundTool, record: ActionRecord, who: ActionIdentity) -> None:
        """`on_unique = "refuse"`: a repeat from another run or step is another logical action."""
        limits = tool.config.limits
        if (
            limits.unique is Unique.SCOPE
            and limits.on_unique is OnUnique.REFUSE
            and (record.run_id, record.step_id) != (who.run_id, who.step_id)
        ):
            raise ScopeTaken(record)

    async def admit(
        self, tool: BoundTool, who: ActionIdentity, payload: Message, now: float
    ) -> tuple[bool, Reservation | None, bool]:
        """A new action: the breaker, then (needs approval, what to reserve with the claim, whether
        rules over the counters are left to decide in the claim: `ruling`)."""
        breaker = self.breakers.get(tool.name)
        if breaker is not None:
            breaker.admit()
        policy = tool.policy
        reservation = policy.reservation(who, payload, now)
        if policy.needs_approval(who, payload, now, rules=policy.payload_rules):
            return True, reservation, False
        if not policy.counter_rules:
            return False, reservation, False
        if reservation is not None:
            return False, reservation, True  # decided where the counters are locked
        # Uncounted: no claim adds to the counters, so what they say now is what the claim would see.
        usage: Sequence[tuple[str, str, int, int]] = await self._store.usage(who.tenant, who.tool)
        return policy.needs_approval(who, payload, now, usage, rules=policy.counter_rules), reservation, False

    def ruling(
        self,
        tool: BoundTool,
        who: ActionIdentity,
        payload: Message,
        now: float,
        held: ActionRecord,
        held_entry: ActionEvent | None,
    ) -> Ruling:
        """The counter rules of `tool`, for the claim's transaction; `held` is the record it writes
        when one of them holds."""
        policy = tool.policy

        def holds(counters: Counters) -> bool:
            usage = [(c, b, e, s) for (c, b), (e, s) in counters.items()]
            return policy.needs_approval(who, payload, now, usage, rules=policy.counter_rules)

        return Ruling(policy.usage_keys(who, payload, now), holds, held, held_entry)

    async def claim(
        self,
        record: ActionRecord,
        reservation: Reservation | None,
        entry: ActionEvent | None = None,
        ruling: Ruling | None = None,
    ) -> tuple[ActionRecord, bool]:
        if reservation is None:
            return await self._store.insert_if_absent(record, entry)
        try:
            return await self._store.claim(record, reservation, entry, ruling)
        except LimitExceeded as exc:
            exc.figures["action_id"] = record.action_id  # what an operator's grant names
            self._observer.limit_denied(record, exc, self._clock())
            raise

    # -- the driver -------------------------------------------------------------------------------

    async def write(self, record: ActionRecord, *, dispatching: bool = False, entry: ActionEvent | None = None) -> bool:
        """`Store.update` (with its entry in the story), and what the write changes in the
        accounting of a counted tool."""
        policy = self._policy(record.tool)
        if policy is None:
            return await self._store.update(record, entry)
        if record.state in UNCOUNTED:
            return await self._store.update_accounted(record, release=True, event=entry)
        if dispatching:
            tool = self._tools.get(record.tool)
            hold = tool.policy.reservation(record.identity, tool.load(record.payload), self._clock())
            try:
                return await self._store.update_accounted(record, hold=hold, event=entry)
            except LimitExceeded as exc:
                exc.figures["action_id"] = record.action_id
                self._observer.limit_denied(record, exc, self._clock())
                raise
        return await self._store.update(record, entry)

    def provider_answered(self, tool: str, failed: bool) -> None:
        breaker = self.breakers.get(tool)
        if breaker is not None:
            breaker.record(failed)

    def _policy(self, name: str) -> object | None:
        try:
            tool = self._tools.get(name)
        except InvalidRequest:  # a tool since removed from the config
            return None
        return tool.policy if tool.policy.counted else None
