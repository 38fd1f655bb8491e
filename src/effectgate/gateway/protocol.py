"""The effect protocol: Execute and Verify as docs/protocol.md describes them, with no gRPC in sight.

Execute = derive the key, normalise and fingerprint the payload, claim the action atomically
(insert-if-absent with a lease), then either answer from the stored outcome, wait for the worker
that holds the lease (single flight), or drive the action under our own lease.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from effectgate.adapters.base import Observation
from effectgate.gateway import audit_log, failpoints, keys, metrics, telemetry
from effectgate.gateway.config import Approval, OnMismatch, OnRepeat
from effectgate.gateway.domain import ActionRecord, ListQuery, NextStep, Page, State
from effectgate.gateway.driver import Driver, DriverSettings, LeaseLost
from effectgate.gateway.errors import (
    ActionNotFound,
    AlreadyExecuted,
    GatewayUnavailable,
    InFlight,
    InvalidRequest,
    PayloadMismatch,
    PolicyConflict,
)
from effectgate.gateway.store.base import Store, StoreUnavailable
from effectgate.gateway.tools import BoundTool, ToolSet

log = logging.getLogger("effectgate.protocol")
T = TypeVar("T")

# Polling back-off while another replica holds the lease.
POLL_MIN, POLL_MAX = 0.02, 0.5


@dataclass(frozen=True)
class ExecuteCommand:
    tenant: str
    run_id: str
    step_id: str
    tool: str
    scope: str
    payload_type_url: str
    payload: bytes
    parent_run_id: str = ""
    agent: str = ""
    tool_call_id: str = ""
    bypass: bool = False


@dataclass(frozen=True)
class ExecuteResult:
    record: ActionRecord
    # True when the answer is a stored outcome and this call made no provider call.
    replayed: bool


def validate_context(run_id: str, step_id: str, tool: str) -> None:
    violations = [
        (name, "must not be empty")
        for name, value in (("context.run_id", run_id), ("context.step_id", step_id), ("tool", tool))
        if not value.strip()
    ]
    if violations:
        raise InvalidRequest(violations)


class EffectProtocol:
    def __init__(
        self,
        store: Store,
        tools: ToolSet,
        settings: DriverSettings,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self.tools = tools
        self.settings = settings
        self.clock = clock
        self.sleep = sleep
        self.driver = Driver(store, settings, clock=clock, sleep=sleep)
        # Drives running in this process, by action id: local duplicates await them, and
        # graceful shutdown lets them finish.
        self.inflight: dict[str, asyncio.Task[ActionRecord]] = {}
        # Set when work appears for the reconciler (an approval, a parked action).
        self.work_ready = asyncio.Event()

    # -- Execute -------------------------------------------------------------------------------

    async def execute(self, cmd: ExecuteCommand, deadline: float) -> ExecuteResult:
        with telemetry.execute_span(cmd.tool, cmd.tool_call_id) as call:
            result = await self._execute(cmd, deadline)
            call.done(result.record, result.replayed)
            return result

    async def _execute(self, cmd: ExecuteCommand, deadline: float) -> ExecuteResult:
        validate_context(cmd.run_id, cmd.step_id, cmd.tool)
        tool = self.tools.get(cmd.tool)
        payload = tool.normalize(tool.parse(cmd.payload_type_url, cmd.payload))
        fingerprint = keys.fingerprint(payload)
        if tool.config.on_repeat is OnRepeat.ALLOW:
            # No dedup for harmless effects: every call is its own action, still recorded.
            action_id = "act_" + uuid.uuid4().hex
        else:
            action_id = keys.action_id(cmd.tenant, cmd.run_id, cmd.step_id, cmd.tool, cmd.scope)
        now = self.clock()
        needs_approval = tool.config.approval is Approval.REQUIRED
        candidate = ActionRecord(
            action_id=action_id,
            tenant=cmd.tenant,
            run_id=cmd.run_id,
            step_id=cmd.step_id,
            parent_run_id=cmd.parent_run_id,
            agent=cmd.agent,
            tool=cmd.tool,
            scope=cmd.scope,
            tool_call_id=cmd.tool_call_id,
            payload_type=tool.payload_type_name,
            payload=payload.SerializeToString(deterministic=True),
            fingerprint=fingerprint,
            state=State.AWAITING_APPROVAL if needs_approval else State.PLANNED,
            next_step=NextStep.APPROVE if needs_approval else NextStep.NONE,
            created_at=now,
            updated_at=now,
            fence=1,
            lease_owner="" if needs_approval else self.settings.owner,
            lease_expires_at=0.0 if needs_approval else now + self.settings.lease_ttl,
            trace_parent=telemetry.traceparent(),
        )
        record, inserted = await self._guard(self.store.insert_if_absent(candidate))
        if inserted:
            failpoints.hit("after_planned")
            if needs_approval:
                return ExecuteResult(record, replayed=False)
            return ExecuteResult(await self._run(record, tool, deadline), replayed=False)
        if record.tenant != cmd.tenant:  # a hash collision across tenants: never mix them
            raise ActionNotFound(action_id)
        return await self._repeat(record, cmd, fingerprint, tool, deadline)

    async def _repeat(
        self, record: ActionRecord, cmd: ExecuteCommand, fingerprint: str, tool: BoundTool, deadline: float
    ) -> ExecuteResult:
        """A second Execute of an existing action."""
        if record.fingerprint != fingerprint and tool.config.on_mismatch is OnMismatch.REFUSE:
            raise PayloadMismatch(record, fingerprint)
        if cmd.bypass:
            return await self._bypass(record, tool, deadline)
        delay = POLL_MIN
        while True:
            if record.state.terminal:
                if tool.config.on_repeat is OnRepeat.REFUSE:
                    raise AlreadyExecuted(record)
                return ExecuteResult(record, replayed=True)
            if record.state is State.AWAITING_APPROVAL:
                return ExecuteResult(record, replayed=True)
            now = self.clock()
            if record.leased_at(now):
                if now >= deadline:
                    raise InFlight(record.action_id, retry_after=max(0.5, record.lease_expires_at - now))
                record, delay = await self._wait_for_holder(record, deadline, delay)
                continue
            leased = await self.try_lease(record.action_id)
            if leased is None:  # someone else took it between our read and our claim
                record = await self._get(record.action_id)
                continue
            metrics.lease_taken_over(record)
            return ExecuteResult(await self._run(leased, tool, deadline), replayed=False)

    async def _wait_for_holder(self, record: ActionRecord, deadline: float, delay: float) -> tuple[ActionRecord, float]:
        telemetry.waited_on_holder()
        task = self.inflight.get(record.action_id)
        if task is not None:  # the holder is in this process: wait for it directly
            remaining = deadline - self.clock()
            try:
                await asyncio.wait_for(asyncio.shield(task), max(remaining, 0.0))
            except TimeoutError:
                pass
            except Exception:  # the holder failed; re-read what it left
                pass
        else:
            await self.sleep(min(delay, max(deadline - self.clock(), 0.0)))
            delay = min(delay * 2, POLL_MAX)
        return await self._get(record.action_id), delay

    async def _bypass(self, record: ActionRecord, tool: BoundTool, deadline: float) -> ExecuteResult:
        if not record.bypass_granted:
            raise PolicyConflict(f"action {record.action_id} has no operator bypass grant", reason="BYPASS_NOT_GRANTED")
        leased = await self.lease(record.action_id)
        fresh = leased.evolve(
            generation=leased.generation + 1,
            state=State.PLANNED,
            bypass_granted=False,
            receipt=None,
            observation=None,
            reason="operator-granted bypass",
            notes=(*leased.notes, f"bypass used at generation {leased.generation + 1}"),
        )
        return ExecuteResult(await self._run(fresh, tool, deadline), replayed=False)

    async def _run(self, record: ActionRecord, tool: BoundTool, deadline: float) -> ActionRecord:
        """Drives a leased action in its own task: a caller that gives up (deadline, cancel)
        does not abort the drive halfway; the outcome is stored for the next caller."""
        task = asyncio.create_task(self._drive(record, tool, deadline))
        self.inflight[record.action_id] = task
        task.add_done_callback(lambda _: self.inflight.pop(record.action_id, None))
        return await asyncio.shield(task)

    async def _drive(self, record: ActionRecord, tool: BoundTool, deadline: float) -> ActionRecord:
        try:
            return audit_log.settled(await self.driver.drive(record, tool, deadline))
        except StoreUnavailable as exc:
            # Something may have been sent already: the lease runs out and the reconciler
            # verifies the action before anything more is sent.
            metrics.store_error("drive")
            raise GatewayUnavailable(
                f"the store failed while the action was in flight ({exc}); it is verified before any "
                "retry: call again with the same run context",
                retry_after=self.settings.lease_ttl,
            ) from exc
        except LeaseLost:
            log.warning("lease on %s lost to another worker; stopped", record.action_id)
            return await self._get(record.action_id)

    async def drive_leased(self, record: ActionRecord) -> ActionRecord:
        """For the reconciler: drive an action it claimed, with the tool's own deadline."""
        tool = self.tools.get(record.tool)
        return await self._run(record, tool, self.clock() + tool.config.deadline)

    # -- Verify, Get, List ---------------------------------------------------------------------

    async def verify(self, tenant: str, action_id: str) -> tuple[ActionRecord, Observation]:
        """A read-back now. It updates the action only if nobody drives it; it never dispatches."""
        record = await self.get(tenant, action_id)
        tool = self.tools.get(record.tool)
        leased = await self.try_lease(action_id)
        if leased is None:  # in flight elsewhere: observe without writing
            return record, await self.driver.read_back(record, tool, self.clock() + tool.config.attempt_timeout)
        try:
            return await self._guard(self.driver.observe(leased, tool))
        except LeaseLost:
            raise InFlight(action_id, retry_after=1.0) from None

    async def get(self, tenant: str, action_id: str) -> ActionRecord:
        record = await self._get(action_id)
        if record.tenant != tenant:
            raise ActionNotFound(action_id)
        return record

    async def list(self, query: ListQuery) -> Page:
        try:
            return await self._guard(self.store.list(query))
        except ValueError:
            raise InvalidRequest([("page_token", "not a token this gateway issued")]) from None

    # -- helpers -------------------------------------------------------------------------------

    async def _get(self, action_id: str) -> ActionRecord:
        record = await self._guard(self.store.get(action_id))
        if record is None:
            raise ActionNotFound(action_id)
        return record

    async def try_lease(self, action_id: str) -> ActionRecord | None:
        return await self._guard(
            self.store.acquire_lease(action_id, self.settings.owner, self.clock(), self.settings.lease_ttl)
        )

    async def lease(self, action_id: str) -> ActionRecord:
        """The action's lease, or InFlight when another worker holds it."""
        leased = await self.try_lease(action_id)
        if leased is None:
            await self._get(action_id)  # raises ActionNotFound when absent
            raise InFlight(action_id, retry_after=1.0)
        return leased

    @staticmethod
    async def _guard(work: Awaitable[T]) -> T:
        """A store that cannot persist fails the call closed: nothing more is sent."""
        try:
            return await work
        except StoreUnavailable as exc:
            metrics.store_error("protocol")
            raise GatewayUnavailable(str(exc)) from exc
