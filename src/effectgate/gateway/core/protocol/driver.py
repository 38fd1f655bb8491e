"""Driving one leased action: write, call, write.

The driver is only ever handed an action whose lease this worker holds. What each event does to
the record (`transitions`) and what to do next (`moves`) are pure functions; the driver only performs
them: it writes the record (conditional on the lease fence: a worker that lost its lease gets
`LeaseLost` and stops at once, before sending anything more), calls the adapter, and writes the
outcome.

Ordering rules that make "at most one effect" hold:
- DISPATCHED is committed before the request leaves (so a crash always leaves evidence);
- a dispatch only follows PLANNED or a proven NOT_FOUND (a read-back sent after `absence_provable_at`:
  the attempt ended, the provider finished, the window passed; or a refusal before acting), or a
  retry with the same key at a provider that deduplicates on it;
- UNKNOWN is never re-dispatched: only verification or an operator moves it.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging

from effectgate.adapters.base import (
    AmbiguousError,
    CredentialsRefused,
    DefinitiveError,
    NoEffectError,
    Observation,
    RateLimited,
)
from effectgate.gateway.config import Approval
from effectgate.gateway.core import failpoints
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.limits.gate import LimitGate
from effectgate.gateway.core.protocol.collaborators import Collaborators, policy_of
from effectgate.gateway.core.tools import BoundTool
from effectgate.gateway.core.transitions.moves import MIN_CALL_BUDGET, next_move, reconciler_sends
from effectgate.gateway.model import (
    UNSENT,
    ActionEvent,
    ActionRecord,
    ClockSkewed,
    LimitExceeded,
    ProviderRateLimited,
    State,
)
from effectgate.gateway.store import StoreUnavailable

log = logging.getLogger("effectgate.driver")

# How much older than its request the intent's `dispatched_at` may be before the request goes out
# (a slow store write, a paused process): past it, the stamp is moved to now by one more write.
STALE_INTENT = 1.0


# The provider calls of the drive running in this task (see `Driver.drive`).
_CALLS: contextvars.ContextVar[list[str]] = contextvars.ContextVar("effectgate_drive_calls")


class SentThenStoreFailed(StoreUnavailable):
    """The store failed after this drive called the provider (the effect may exist)."""


class LeaseLost(Exception):
    """Another worker took the action over; this one must stop without writing."""


class Driver:
    def __init__(self, parts: Collaborators) -> None:
        """Takes what it uses from the protocol's one holder of collaborators."""
        self.store = parts.store
        self.gate: LimitGate | None = parts.limits
        # Told of every write the provider answered with a receipt (the read-lag sampler).
        self.on_answered = parts.on_answered
        self.settings = parts.settings
        self.clock = parts.clock
        self.sleep = parts.sleep
        self.clock_problem = parts.clock_problem
        self.observer = parts.observer
        # The provider calls running now: action id -> when the call's budget ends (our clock).
        # A caller whose deadline comes first is answered IN_FLIGHT while the call goes on.
        self.calling: dict[str, float] = {}

    async def drive(
        self,
        record: ActionRecord,
        tool: BoundTool,
        deadline: float,
        *,
        unsent: bool = False,
        current: BoundTool | None = None,
        reconciling: bool = False,
    ) -> ActionRecord:
        """Moves a leased action as far as `deadline` allows, then releases the lease.

        `unsent`: the record was claimed already DISPATCHED and nothing has been sent yet, so
        the first step is the send itself (the claim was its durable intent). `current`: the tool
        as configured now, when `tool` reads the attempt in doubt through the adapter that
        dispatched it (`ToolSet.driving`): once the attempt is proven absent, the next send goes
        through `current`. `reconciling`: no agent asks (the reconciler's drive), so the sends
        are what is left of the generation's `max_attempts`, not a fresh budget. A store failure
        once the provider was called is `SentThenStoreFailed`."""
        calls: list[str] = []
        token = _CALLS.set(calls)
        sends = reconciler_sends(record, tool.config.max_attempts) if reconciling else tool.config.max_attempts
        try:
            return await self._drive(record, tool, deadline, unsent=unsent, current=current, sends=sends)
        except StoreUnavailable as exc:
            if calls and not isinstance(exc, SentThenStoreFailed):
                raise SentThenStoreFailed(str(exc)) from exc
            raise
        finally:
            _CALLS.reset(token)

    async def _drive(
        self,
        record: ActionRecord,
        tool: BoundTool,
        deadline: float,
        *,
        unsent: bool,
        current: BoundTool | None,
        sends: int,
    ) -> ActionRecord:
        policy = policy_of(tool, self.settings)
        sends_left = sends
        observed: Observation | None = None
        refusal: t.RefusedBeforeActing | None = None
        refusals = 0
        if unsent:
            sends_left -= 1
            await self._refuse_if_skewed(record, policy, recorded=True)
            record, refusal = await self._send(record, tool, deadline, policy)
            refusals += refusal is not None
        while True:
            move = next_move(
                record,
                now=self.clock(),
                deadline=deadline,
                sends_left=sends_left,
                observed=observed,
                refusal=refusal,
                refusals=refusals,
                policy=policy,
                same_key_retry=not approval_outdated(record, tool),
            )
            if move.kind == "stop":
                record = await self.release(record)
                if move.rate_limited:
                    raise ProviderRateLimited(record.action_id, retry_after=move.pause)
                return record
            if move.pause:
                await self.sleep(move.pause)
            if move.kind == "send" and current is not None and record.state in UNSENT:
                # The old adapter's attempt is proven absent: from here the tool's own adapter sends.
                tool, current = current, None
                policy = policy_of(tool, self.settings)
            if move.kind == "send" and approved_under_another_policy(record, tool):
                # Proven unsent (NOT_FOUND) under a policy that changed since its approval: the
                # old approval sends nothing, people decide again (docs/decisions.md, the policy).
                event = t.Reapprove(tool.policy_version)
                return await self.release(t.apply(record, event, self.clock(), policy), event)
            if move.kind == "send":
                await self._refuse_if_skewed(record, policy, recorded=False)
                sends_left -= 1
                over_doubt = record.state is State.DISPATCHED  # a same-key retry: attempt n-1 is in doubt
                try:
                    record = await self.step(record, t.Dispatch(tool.config.adapter), policy, dispatching=True)
                except LimitExceeded:  # out of NOT_FOUND, its released reservation no longer fits
                    await self.release(record)
                    raise
                failpoints.hit("after_dispatched")
                record, refusal = await self._send(record, tool, deadline, policy, over_doubt=over_doubt)
                refusals = refusals + 1 if refusal is not None else 0
                observed = None
            elif move.kind == "check":
                read_at = self.clock()
                observed = await self.read_back(record, tool, deadline)
                record = await self.step(record, t.Observed(observed, read_at=read_at), policy)
                # `refusal` is kept: a retry refused while attempt n-1 is in doubt is read back,
                # and the next retry still waits the pause the provider asked for.
            elif move.kind == "wait":
                observed = None  # check again after the pause
            else:  # park
                record = await self.step(record, t.Park(), policy)

    async def observe(self, record: ActionRecord, tool: BoundTool) -> tuple[ActionRecord, Observation]:
        """One read-back applied to a leased record, never a dispatch (the Verify RPC)."""
        policy = policy_of(tool, self.settings)
        read_at = self.clock()
        observation = await self.read_back(record, tool, deadline=read_at + tool.config.attempt_timeout)
        if t.allows(record.state, t.Observed.name):
            record = await self.step(record, t.Observed(observation, read_at=read_at), policy)
            if record.state is State.DISPATCHED:  # inside the window: not proof of absence
                record = await self.step(record, t.Park(), policy)
        return await self.release(record), observation

    async def hold(self, record: ActionRecord, tool: BoundTool, detail: str, **evidence: object) -> ActionRecord:
        """Keeps a leased action in doubt without reading or sending (its attempt cannot be read:
        `ToolSet.driving`): UNKNOWN with `detail`, re-checked later, and the lease let go."""
        policy = policy_of(tool, self.settings)
        observation = Observation.unknown(detail, **evidence)
        record = await self.step(record, t.Observed(observation, read_at=self.clock()), policy)
        return await self.release(record)

    async def _refuse_if_skewed(self, record: ActionRecord, policy: t.Policy, *, recorded: bool) -> None:
        """Sends nothing while this replica's clock is not trusted: stops and lets the lease go.
        `recorded`: the record already says DISPATCHED for a send that is not made; NotSent
        writes that nothing left, so the next holder's verification starts its window now."""
        problem = self.clock_problem()
        if not problem:
            return
        if recorded:
            record = await self.step(record, t.NotSent(), policy)
        await self.release(record)
        raise ClockSkewed(f"{problem}: {record.action_id} was not sent; another replica takes it over")

    # -- calls -------------------------------------------------------------------------------------

    async def _send(
        self, record: ActionRecord, tool: BoundTool, deadline: float, policy: t.Policy, *, over_doubt: bool = False
    ) -> tuple[ActionRecord, t.RefusedBeforeActing | None]:
        """One provider call for a record already durably DISPATCHED, and the write of what it
        said. Returns the refusal when the provider refused before acting.

        The call runs for its full `attempt_timeout` whatever the caller's deadline: a call we cut
        early may still be applied by the provider, and the proof of absence can only start once
        the provider can no longer apply it. The caller is answered at its deadline meanwhile
        (`EffectProtocol._run`); the call is only ever capped by our own lease, which is renewed
        first when it would not cover the call. The caller's deadline only decides whether a
        call starts at all."""
        attempt = tool.config.attempt_timeout
        if record.dispatched_at is not None and self.clock() - record.dispatched_at > STALE_INTENT:
            # The intent's write (or this process) stalled between its stamp and now: the proof of
            # absence counts the provider's time from `dispatched_at`, so it must not be older than
            # the request it times (simulator seed 1440: a 10 s stall made absence provable early).
            record = await self._write(record.evolve(dispatched_at=self.clock()), policy)
        if (
            deadline - self.clock() >= MIN_CALL_BUDGET
            and record.lease_expires_at - self.clock() < attempt + MIN_CALL_BUDGET
        ):
            record = await self._write(record, policy)  # renews the lease (the config keeps attempt < lease)
        timeout = min(attempt, record.lease_expires_at - self.clock())
        if timeout < MIN_CALL_BUDGET or deadline - self.clock() < MIN_CALL_BUDGET:
            # The write below proves nothing was sent yet; verification will say NOT_FOUND.
            return await self.step(record, t.NotSent(), policy), None
        sent_at = self.clock()  # before the provider could commit: a read lag measured from here errs long
        self.calling[record.action_id] = sent_at + timeout
        try:
            event = await self._call(record, tool, timeout)
        finally:
            del self.calling[record.action_id]
        if over_doubt and isinstance(event, t.RefusedBeforeActing):
            event = dataclasses.replace(event, over_doubt=True)  # proves nothing of attempt n-1
        if self.gate is not None:
            self.gate.provider_answered(record.tool, isinstance(event, t.Ambiguous | t.RefusedBeforeActing))
        if isinstance(event, t.Answered):
            failpoints.hit("after_provider_commit")
        record = await self.step(record, event, policy)
        if isinstance(event, t.Answered) and self.on_answered is not None:
            self.on_answered(record, tool, sent_at)
        return record, event if isinstance(event, t.RefusedBeforeActing) else None

    async def _call(self, record: ActionRecord, tool: BoundTool, timeout: float) -> t.Event:
        """The adapter's execute, classified into an event."""
        calls = _CALLS.get(None)
        if calls is not None:
            calls.append(record.action_id)
        try:
            with self.observer.provider_call("execute", record, tool.config.adapter):
                # asyncio.timeout, not wait_for: no task of its own, so no extra loop turns.
                async with asyncio.timeout(timeout):
                    receipt = await tool.adapter.execute(tool.action_call(record))
        except DefinitiveError as exc:
            return t.Refused(code=exc.code, message=exc.message, details=dict(exc.details))
        except RateLimited as exc:
            return t.RefusedBeforeActing(exc.message, retry_after=exc.retry_after)
        except CredentialsRefused as exc:
            # An operator's problem, not the agent's: every call to this adapter fails until the
            # key is fixed. A warning, and a metric (the provider call's watch counts it);
            # readiness stays on (docs/production.md).
            where = tool.credentials or f"[adapters.{tool.config.adapter}]"
            log.warning("provider refused the credentials of %s: %s", where, exc.message)
            # Never "retry later": nothing changes until the key does.
            return t.RefusedBeforeActing(
                f"{exc.message}; nothing was sent. The provider refused the key set by {where}: "
                "an operator must fix it (`effectgate check --probe` tests it)"
            )
        except NoEffectError as exc:
            return t.RefusedBeforeActing(exc.message)
        except AmbiguousError as exc:
            log.info("ambiguous outcome for %s: %s", record.action_id, exc.message)
            return t.Ambiguous(exc.message)
        except Exception as exc:
            # Our timeout, a reset, or an adapter bug: the request may have reached the provider,
            # so this is ambiguous too and verification decides.
            log.info("ambiguous outcome for %s: %s", record.action_id, type(exc).__name__)
            return t.Ambiguous(type(exc).__name__)
        return t.Answered(receipt)

    async def read_back(self, record: ActionRecord, tool: BoundTool, deadline: float) -> Observation:
        timeout = max(MIN_CALL_BUDGET, min(tool.config.attempt_timeout, deadline - self.clock()))
        try:
            with self.observer.provider_call("verify", record, tool.config.adapter) as call:
                async with asyncio.timeout(timeout):
                    observation = await tool.adapter.verify(tool.action_call(record))
                call.observed(observation)
                return observation
        except TimeoutError:
            return Observation.unknown("read-back timed out")
        except Exception as exc:  # an adapter bug must not lose the action
            detail = getattr(exc, "message", type(exc).__name__)
            return Observation.unknown(f"read-back failed: {detail}")

    # -- helpers -----------------------------------------------------------------------------------

    async def step(
        self, record: ActionRecord, event: t.Event, policy: t.Policy, *, dispatching: bool = False
    ) -> ActionRecord:
        """Applies `event` to a leased record and writes it, with its entry in the action's story."""
        return await self._write(t.apply(record, event, self.clock(), policy), policy, event, dispatching=dispatching)

    async def _write(
        self, record: ActionRecord, policy: t.Policy, event: t.Event | None = None, *, dispatching: bool = False
    ) -> ActionRecord:
        """Writes under our lease (renewed, or released when the action settled)."""
        now = self.clock()
        fresh = t.stamped(record, now, policy)
        if not await self._put(fresh, dispatching, None if event is None else t.entry(event, fresh, now)):
            raise LeaseLost(record.action_id)
        return fresh

    async def release(self, record: ActionRecord, event: t.Event | None = None) -> ActionRecord:
        """Lets the lease go; `event`: the change (already applied) this write records."""
        if not record.lease_owner and event is None:
            return record  # released by the write that settled it
        now = self.clock()
        released = t.released(record, now)
        if not await self._put(released, False, None if event is None else t.entry(event, released, now)):
            raise LeaseLost(record.action_id)
        return released

    async def _put(self, record: ActionRecord, dispatching: bool, entry: ActionEvent | None) -> bool:
        """One conditional write with its entry in the story; a counted tool's accounting follows
        the state in the same transaction (core/limits/gate.py)."""
        if self.gate is None:
            return await self.store.update(record, entry)
        return await self.gate.write(record, dispatching=dispatching, entry=entry)


def approved_under_another_policy(record: ActionRecord, tool: BoundTool) -> bool:
    """Approved, not yet sent (PLANNED, or proven NOT_FOUND), and the tool's policy changed since
    (a restart with another config): the approval was for the old policy, so the action waits for
    a new one (docs/states.md)."""
    return record.state in UNSENT and approval_outdated(record, tool)


def approval_outdated(record: ActionRecord, tool: BoundTool) -> bool:
    """The action was approved under a policy of the tool that is no longer its policy. Nothing
    is sent on that approval any more: not a first send, and not a same-key retry of an attempt
    in doubt either, which would be the effect's first arrival if the attempt never got there
    (the simulator's seed 77042): the attempt is read back until it is proven present or absent."""
    return (
        bool(record.approvals)
        and bool(record.policy_version)
        and record.policy_version != tool.policy_version
        and tool.config.approval is Approval.REQUIRED
    )
