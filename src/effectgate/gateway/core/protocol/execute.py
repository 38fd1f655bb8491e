"""The Execute path, as docs/protocol.md describes it, with no gRPC in sight.

Execute = derive the key, normalise and fingerprint the payload, read the action (a replay ends
here, usually from the cache of settled records), else claim it atomically (insert-if-absent,
already DISPATCHED under our lease when no approval is needed), then either answer from the
stored outcome, wait for the worker that holds the lease (single flight), or drive the action
under our own lease.

This module also holds the drives this process runs, which the reconciler's `drive_leased` and
the server's `drain` use too. It takes leases through `leases` and everything else from the
protocol's `Collaborators`; `verbs.EffectProtocol` is the face the callers hold.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
import uuid
from dataclasses import dataclass

from effectgate.gateway.config import Approval, OnMismatch, OnRepeat
from effectgate.gateway.core import failpoints
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.protocol.collaborators import Collaborators
from effectgate.gateway.core.protocol.driver import (
    Driver,
    LeaseLost,
    SentThenStoreFailed,
    approved_under_another_policy,
)
from effectgate.gateway.core.protocol.leases import POLL_MIN, Leases
from effectgate.gateway.core.protocol.replay_cache import RequestKey
from effectgate.gateway.core.tools import BoundTool, DispatcherGone
from effectgate.gateway.core.transitions.moves import MIN_CALL_BUDGET
from effectgate.gateway.model import (
    ActionEvent,
    ActionIdentity,
    ActionNotFound,
    ActionRecord,
    AlreadyExecuted,
    GatewayUnavailable,
    InFlight,
    InvalidRequest,
    PayloadMismatch,
    PolicyConflict,
    Reservation,
    Ruling,
    State,
    StoreFailedAfterSend,
    keys,
)
from effectgate.gateway.store import StoreUnavailable

log = logging.getLogger("effectgate.protocol")

# A duplicate waiting for the holder answers IN_FLIGHT this long before the caller's deadline
# (half its budget at most), so that the answer reaches the caller before its deadline fires.
ANSWER_MARGIN = 1.0
# How often a caller past its answer time looks whether its drive started a provider call.
CALL_POLL = 0.02


def answer_by(deadline: float, now: float) -> float:
    return deadline - min(ANSWER_MARGIN, max(deadline - now, 0.0) / 2)


@dataclass(frozen=True)
class ExecuteCommand:
    identity: ActionIdentity
    payload_type_url: str
    payload: bytes
    bypass: bool = False


@dataclass(frozen=True)
class ExecuteResult:
    record: ActionRecord
    # True when the answer is a stored outcome and this call made no provider call.
    replayed: bool
    # A replay of a kept settled action: its answer, already made by the RPC layer's serializer
    # (see `answer_replays_with`); None otherwise.
    answer: bytes | None = None


def request_key(cmd: ExecuteCommand) -> RequestKey:
    who = cmd.identity
    return (who.tenant, who.run_id, who.step_id, who.tool, who.scope, cmd.payload_type_url, cmd.payload)


def validate_context(run_id: str, step_id: str, tool: str) -> None:
    violations = [
        (name, "must not be empty")
        for name, value in (("context.run_id", run_id), ("context.step_id", step_id), ("tool", tool))
        if not value.strip()
    ]
    if violations:
        raise InvalidRequest(violations)


class ExecutePath:
    def __init__(self, parts: Collaborators, driver: Driver, leases: Leases) -> None:
        self._parts = parts
        self._driver = driver
        self._leases = leases

    # -- Execute -------------------------------------------------------------------------------

    async def execute(self, cmd: ExecuteCommand, deadline: float) -> ExecuteResult:
        with self._parts.observer.execute(cmd.identity.tool, cmd.identity.tool_call_id) as call:
            result = self._known_replay(cmd) or await self._execute(cmd, deadline, call.traceparent)
            call.done(result.record, result.replayed)
            return result

    def replay(
        self, tenant: str, run_id: str, step_id: str, tool: str, scope: str, type_url: str, payload: bytes, call_id: str
    ) -> bytes | None:
        """The hottest path, before any command is built: the answer `execute` gives the very
        request answered before (no bypass: the caller's to check) for an action the settled
        cache still holds, told to the observer as one replayed Execute. None: call `execute`,
        which decides the same way (`_known_replay`) and answers every other case."""
        started = time.perf_counter()
        kept = self._parts.cache.known((tenant, run_id, step_id, tool, scope, type_url, payload))
        if kept is None or kept.record.tool not in self._parts.tools.coalescing:
            return None
        answer = kept.answer if kept.answer is not None else self._parts.cache.answer(kept)
        if answer is not None:  # none without the RPC layer's serializer
            self._parts.observer.replayed(kept.record, call_id, started)
        return answer

    def _known_replay(self, cmd: ExecuteCommand) -> ExecuteResult | None:
        """The hottest path: the very request that was answered before, for an action the
        settled cache still holds. Anything else (a bypass, a refusing tool, a cache miss) takes
        the full path, which gives the same answer more slowly."""
        if cmd.bypass:
            return None
        kept = self._parts.cache.known(request_key(cmd))
        if kept is None or kept.record.tool not in self._parts.tools.coalescing:
            return None
        answer = kept.answer
        return ExecuteResult(kept.record, True, answer if answer is not None else self._parts.cache.answer(kept))

    async def _execute(self, cmd: ExecuteCommand, deadline: float, traceparent: str) -> ExecuteResult:
        self._parts.refuse_if_skewed()  # before anything is read, stored or sent
        who = cmd.identity
        validate_context(who.run_id, who.step_id, who.tool)
        tool = self._parts.tools.get(who.tool)
        payload = tool.normalize(tool.parse(cmd.payload_type_url, cmd.payload))
        fingerprint = keys.fingerprint(payload)
        limited_id = self._parts.limits.action_id(tool, who, payload)  # the payload's bounds checked first
        if tool.config.on_repeat is OnRepeat.ALLOW:
            # No dedup for harmless effects: every call is its own action, still recorded.
            action_id = "act_" + uuid.uuid4().hex
        else:
            action_id = limited_id
            # Read before claim: an existing action never takes the write path. A bypass always
            # reads the store (a grant may come from another replica).
            existing = None if cmd.bypass else self._parts.cache.get(action_id)
            if existing is None:
                existing = await self._parts.guard(self._parts.store.get(action_id))
            if existing is not None:
                result = await self._repeat(existing, cmd, fingerprint, tool, deadline)
                self._parts.cache.learn(request_key(cmd), action_id)  # the payload passed the fingerprint check
                return result
        now = self._parts.clock()
        ruled, reservation, deferred = await self._parts.guard(self._parts.limits.admit(tool, who, payload, now))
        needs_approval = tool.config.approval is Approval.REQUIRED or ruled
        claim = t.Claim(
            identity=who,
            action_id=action_id,
            payload_type=tool.payload_type_name,
            payload=payload.SerializeToString(deterministic=True),
            fingerprint=fingerprint,
            owner=self._parts.settings.owner,
            approval=needs_approval,
            # Two durable writes for a new action: the claim is the DISPATCHED intent.
            send_now=deadline - now >= MIN_CALL_BUDGET,
            trace_parent=traceparent,
            policy_version=tool.policy_version,
            adapter=tool.config.adapter,
        )
        created = t.create(claim, now, self._parts.policy(tool))
        ruling = None
        if deferred and not needs_approval:  # rules over the counters: decided in the claim
            asked = dataclasses.replace(claim, approval=True)
            held = t.create(asked, now, self._parts.policy(tool))
            ruling = self._parts.limits.ruling(tool, who, payload, now, held, t.entry(asked, held, now))
        record, inserted = await self._claim(created, t.entry(claim, created, now), reservation, ruling)
        if not inserted:  # another caller claimed it between our read and our insert
            return await self._repeat(record, cmd, fingerprint, tool, deadline)
        if record.state is State.AWAITING_APPROVAL:
            return ExecuteResult(record, replayed=False)
        failpoints.hit("after_dispatched" if record.state is State.DISPATCHED else "after_planned")
        settled = await self._run(record, tool, deadline, unsent=True)
        if tool.config.on_repeat is not OnRepeat.ALLOW:  # its action id names this request's action
            self._parts.cache.learn(request_key(cmd), action_id)
        return ExecuteResult(settled, replayed=False)

    async def _claim(
        self, record: ActionRecord, entry: ActionEvent, reservation: Reservation | None, ruling: Ruling | None = None
    ) -> tuple[ActionRecord, bool]:
        """Inserts the claim. While the insert commits, a duplicate in this process that already
        sees the claimed row waits on `claiming` instead of polling: the future resolves when the
        insert returns, and by the time its waiters run, the drive is registered in `_inflight`."""
        claiming = asyncio.get_running_loop().create_future()
        self._parts.claiming.setdefault(record.action_id, claiming)
        try:
            return await self._parts.guard(self._parts.limits.claim(record, reservation, entry, ruling))
        finally:
            if self._parts.claiming.get(record.action_id) is claiming:
                del self._parts.claiming[record.action_id]
            claiming.set_result(None)

    async def _repeat(
        self, record: ActionRecord, cmd: ExecuteCommand, fingerprint: str, tool: BoundTool, deadline: float
    ) -> ExecuteResult:
        """A second Execute of an existing action."""
        if record.tenant != cmd.identity.tenant:  # a hash collision across tenants: never mix them
            raise ActionNotFound(record.action_id)
        self._parts.limits.refuse_repeat(tool, record, cmd.identity)
        if record.fingerprint != fingerprint and tool.config.on_mismatch is OnMismatch.REFUSE:
            raise PayloadMismatch(record, fingerprint)
        if cmd.bypass:
            return await self._bypass(record, tool, deadline)
        delay = POLL_MIN
        patience = answer_by(deadline, self._parts.clock())
        while True:
            if record.state.terminal:
                if tool.config.on_repeat is OnRepeat.REFUSE:
                    self._parts.cache.put(record)
                    raise AlreadyExecuted(record)
                return ExecuteResult(record, True, self._parts.cache.replay(record))
            if record.state is State.AWAITING_APPROVAL:
                return ExecuteResult(record, replayed=True)
            now = self._parts.clock()
            if record.leased_at(now):
                if now >= patience:
                    raise InFlight(record.action_id, retry_after=max(0.5, record.lease_expires_at - now))
                record, delay = await self._wait_for_holder(record, patience, delay)
                continue
            leased = await self._leases.try_lease(record.action_id)
            if leased is None:  # someone else took it between our read and our claim
                record = await self._parts.get(record.action_id)
                continue
            self._parts.observer.lease_taken_over(record)
            return ExecuteResult(await self._run(leased, tool, deadline), replayed=False)

    async def _wait_for_holder(self, record: ActionRecord, deadline: float, delay: float) -> tuple[ActionRecord, float]:
        self._parts.observer.waited_on_holder()
        delay = await self._leases.wait_for_holder(record, deadline, delay)
        return await self._parts.get(record.action_id), delay

    async def _bypass(self, record: ActionRecord, tool: BoundTool, deadline: float) -> ExecuteResult:
        if not record.bypass_granted:
            raise PolicyConflict(f"action {record.action_id} has no operator bypass grant", reason="BYPASS_NOT_GRANTED")
        leased = await self._leases.lease(record.action_id)
        if not leased.bypass_granted:  # used by another caller between our read and our lease
            raise PolicyConflict(f"action {record.action_id} has no operator bypass grant", reason="BYPASS_NOT_GRANTED")
        try:  # written with its entry in the story before the new generation is sent
            fresh = await self._parts.guard(self._driver.step(leased, t.UseBypass(), self._parts.policy(tool)))
        except LeaseLost:
            raise InFlight(record.action_id, retry_after=1.0) from None
        return ExecuteResult(await self._run(fresh, tool, deadline), replayed=False)

    # -- the drives running in this process (also the reconciler's and the server's) -------------

    async def _run(
        self, record: ActionRecord, tool: BoundTool, deadline: float, *, unsent: bool = False, caller: bool = True
    ) -> ActionRecord:
        """Drives a leased action in its own task: a caller that gives up (deadline, cancel)
        does not abort the drive halfway; the outcome is stored for the next caller. A `caller`
        is answered before its deadline: when a provider call is still running then (it is never
        cut by the caller's deadline: `Driver._send`), with IN_FLIGHT and a RetryInfo of the
        call's remaining budget, while the call and the drive go on under our lease."""
        task = asyncio.create_task(self._drive(record, tool, deadline, unsent, caller))
        self._parts.inflight[record.action_id] = task
        task.add_done_callback(functools.partial(self._finished, record.action_id))
        if caller:
            await self._answer_in_time(task, record.action_id, deadline)
        settled = await asyncio.shield(task)
        self._parts.cache.put(settled)
        return settled

    async def _answer_in_time(self, task: asyncio.Task[ActionRecord], action_id: str, deadline: float) -> None:
        """Returns once `task` is done, or once it is past the caller's answer time and no
        provider call is running (the drive's own moves end by `deadline`); raises InFlight
        when a provider call is running at the answer time, or starts after it."""
        answer_at = answer_by(deadline, self._parts.clock())
        while not task.done():
            now = self._parts.clock()
            if now >= answer_at:
                ends = self._driver.calling.get(action_id)
                if ends is not None:
                    raise InFlight(action_id, retry_after=max(0.5, ends - now))
                if now >= deadline:
                    return  # the drive is finishing a write after the deadline: wait for it
            await asyncio.wait([task], timeout=max(answer_at - now, CALL_POLL))

    def _finished(self, action_id: str, task: asyncio.Task[ActionRecord]) -> None:
        if self._parts.inflight.get(action_id) is task:
            del self._parts.inflight[action_id]
        if not task.cancelled():
            task.exception()  # retrieved: its callers (if any are left) got it already

    async def _drive(
        self, record: ActionRecord, tool: BoundTool, deadline: float, unsent: bool, caller: bool
    ) -> ActionRecord:
        try:
            if approved_under_another_policy(record, tool):  # nothing is sent: it asks again
                event = t.Reapprove(tool.policy_version)
                changed = t.apply(record, event, self._parts.clock(), self._parts.policy(tool))
                return await self._driver.release(changed, event)
            try:
                # An attempt in doubt is read (and retried) only where it was sent (ToolSet.driving).
                sender = self._parts.tools.driving(record)
            except DispatcherGone as gone:
                log.warning("%s stays in doubt: %s", record.action_id, gone.reason)
                return await self._driver.hold(record, tool, gone.reason, dispatched_by=gone.adapter)
            moved = sender.config.adapter != tool.config.adapter
            settled = await self._driver.drive(
                record,
                sender if moved else tool,
                deadline,
                unsent=unsent and record.state is State.DISPATCHED,
                current=tool if moved else None,
                reconciling=not caller,
            )
            self._parts.observer.settled(settled)
            return settled
        except SentThenStoreFailed as exc:
            # The provider was called: the effect may exist. The lease runs out and the
            # reconciler verifies the action before anything more is sent.
            self._parts.observer.store_error("drive")
            raise StoreFailedAfterSend(
                f"the store failed after the request reached the provider ({exc}); the action is "
                "verified before anything is sent again: call again with the same run context, never a new one",
                retry_after=self._parts.settings.lease_ttl,
            ) from exc
        except StoreUnavailable as exc:
            # Nothing was sent by this call; the action is verified before any send.
            self._parts.observer.store_error("drive")
            raise GatewayUnavailable(
                f"the store failed while the action was in flight ({exc}), before anything was sent: "
                "call again with the same run context",
                retry_after=self._parts.settings.lease_ttl,
            ) from exc
        except LeaseLost:
            log.warning("lease on %s lost to another worker; stopped", record.action_id)
            return await self._parts.get(record.action_id)

    async def drive_leased(self, record: ActionRecord) -> ActionRecord:
        """For the reconciler: drive an action it claimed, with the tool's own deadline."""
        tool = self._parts.tools.get(record.tool)
        return await self._run(record, tool, self._parts.clock() + tool.config.deadline, caller=False)

    async def drain(self, timeout: float) -> None:
        """Lets the drives running in this process finish, for at most `timeout` seconds."""
        inflight = list(self._parts.inflight.values())
        if inflight:
            await asyncio.wait(inflight, timeout=timeout)
