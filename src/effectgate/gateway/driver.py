"""Driving one leased action: dispatch, classify, verify, settle.

The driver is only ever handed an action whose lease this worker holds. Every write goes through
`_write`, which is conditional on the lease fence: if another worker took the action over, the
write fails with `LeaseLost` and this worker stops at once, before sending anything more.

Ordering rules that make "at most one effect" hold:
- DISPATCHED is committed before the request leaves (so a crash always leaves evidence);
- a dispatch only follows PLANNED or a proven NOT_FOUND (a read-back older than the consistency
  window), or a retry with the same key at a provider that deduplicates on it;
- UNKNOWN is never re-dispatched: only verification or an operator moves it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from effectgate.adapters.base import (
    ActionCall,
    AmbiguousError,
    DefinitiveError,
    NoEffectError,
    Observation,
    Outcome,
    Receipt,
)
from effectgate.gateway import failpoints, telemetry
from effectgate.gateway.domain import ActionRecord, NextStep, State
from effectgate.gateway.keys import provider_key
from effectgate.gateway.store.base import Store
from effectgate.gateway.tools import BoundTool

log = logging.getLogger("effectgate.driver")
T = TypeVar("T")

# Pause between same-key retries at a deduplicating provider (409 "key in use" needs a moment).
RETRY_PAUSE = 0.2
# Never start a provider call with less than this much of the lease or deadline left.
MIN_CALL_BUDGET = 0.05


class LeaseLost(Exception):
    """Another worker took the action over; this one must stop without writing."""


@dataclass(frozen=True)
class DriverSettings:
    owner: str
    lease_ttl: float
    recheck_min: float
    recheck_max: float


class Driver:
    def __init__(
        self,
        store: Store,
        settings: DriverSettings,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.sleep = sleep

    async def drive(self, record: ActionRecord, tool: BoundTool, deadline: float) -> ActionRecord:
        """Moves a leased action as far as `deadline` allows, then releases the lease."""
        budget = tool.config.max_attempts
        while True:
            if record.state in (State.PLANNED, State.NOT_FOUND):
                if budget <= 0 or self._left(record, deadline) < MIN_CALL_BUDGET:
                    return await self.release(record)
                budget -= 1
                record = await self._dispatch(record, tool, deadline)
            elif record.state in (State.DISPATCHED, State.UNKNOWN):
                record, retry_now = await self._verify(record, tool, deadline)
                if retry_now and budget > 0 and self._left(record, deadline) > RETRY_PAUSE:
                    # Same key at a provider that deduplicates: a retry cannot double the effect
                    # and usually answers with the stored receipt at once.
                    await self.sleep(RETRY_PAUSE)
                    budget -= 1
                    record = await self._dispatch(record, tool, deadline)
                elif record.state is State.DISPATCHED:
                    record = await self._wait_or_park(record, tool, deadline)
                    if record.state is State.UNKNOWN:
                        return await self.release(record)
                elif record.state is not State.NOT_FOUND:
                    return await self.release(record)
            else:  # settled, or waiting for approval
                return await self.release(record)

    async def observe(self, record: ActionRecord, tool: BoundTool) -> tuple[ActionRecord, Observation]:
        """One read-back applied to a leased record, never a dispatch (the Verify RPC)."""
        observation = await self.read_back(record, tool, deadline=self.clock() + tool.config.attempt_timeout)
        if record.state in (State.DISPATCHED, State.UNKNOWN):
            record = await self._apply(record, tool, observation)
            if record.state is State.DISPATCHED:  # inside the window: not proof of absence
                record = await self._park(record, tool)
        return await self.release(record), observation

    # -- steps ---------------------------------------------------------------------------------

    async def _dispatch(self, record: ActionRecord, tool: BoundTool, deadline: float) -> ActionRecord:
        now = self.clock()
        record = await self._write(
            record.evolve(
                state=State.DISPATCHED,
                attempts=record.attempts + 1,
                dispatched_at=now,
                checks=0,
                reason="dispatched",
                next_step=NextStep.NONE,
                next_check_at=None,
            )
        )
        failpoints.hit("after_dispatched")
        timeout = min(tool.config.attempt_timeout, self._left(record, deadline))
        if timeout < MIN_CALL_BUDGET:
            # The write above proves nothing was sent yet; verification will say NOT_FOUND.
            return await self._write(record.evolve(reason="no time left to send"))
        call = self._call(record, tool)
        try:
            with telemetry.provider_span("execute", record, tool.config.adapter):
                receipt = await asyncio.wait_for(tool.adapter.execute(call), timeout)
        except DefinitiveError as exc:
            return await self._write(
                record.evolve(
                    state=State.REJECTED,
                    reason=f"rejected by provider: {exc.message}",
                    receipt=Receipt(external_id="", result={"code": exc.code, "error": exc.message, **exc.details}),
                )
            )
        except NoEffectError as exc:
            return await self._write(
                record.evolve(
                    state=State.NOT_FOUND,
                    reason=f"provider refused before acting: {exc.message}",
                    next_step=NextStep.DISPATCH,
                )
            )
        except (AmbiguousError, TimeoutError, Exception) as exc:
            detail = exc.message if isinstance(exc, AmbiguousError) else type(exc).__name__
            log.info("ambiguous outcome for %s: %s", record.action_id, detail)
            return await self._write(record.evolve(reason=f"ambiguous: {detail}"))
        failpoints.hit("after_provider_commit")
        return await self._write(
            record.evolve(state=State.CONFIRMED, receipt=receipt, reason="receipt", next_step=NextStep.NONE)
        )

    async def _verify(self, record: ActionRecord, tool: BoundTool, deadline: float) -> tuple[ActionRecord, bool]:
        """One read-back. Returns the updated record and whether a same-key retry is safe now."""
        observation = await self.read_back(record, tool, deadline)
        record = await self._apply(record, tool, observation)
        caps = tool.adapter.capabilities
        retry_now = (
            record.state is State.DISPATCHED
            and observation.outcome is Outcome.NOT_FOUND
            and caps.dedups_on_key
            and self._within_key_retention(record, tool)
        )
        return record, retry_now

    async def read_back(self, record: ActionRecord, tool: BoundTool, deadline: float) -> Observation:
        timeout = max(MIN_CALL_BUDGET, min(tool.config.attempt_timeout, deadline - self.clock()))
        try:
            with telemetry.provider_span("verify", record, tool.config.adapter) as call:
                observation = await asyncio.wait_for(tool.adapter.verify(self._call(record, tool)), timeout)
                call.observed(observation)
                return observation
        except TimeoutError:
            return Observation.unknown("read-back timed out")
        except Exception as exc:  # an adapter bug must not lose the action
            detail = getattr(exc, "message", type(exc).__name__)
            return Observation.unknown(f"read-back failed: {detail}")

    async def _apply(self, record: ActionRecord, tool: BoundTool, obs: Observation) -> ActionRecord:
        """Turns an observation into a state. DISPATCHED comes back when absence is not yet proven."""
        now = self.clock()
        checks = record.checks + 1
        if obs.outcome is Outcome.CONFIRMED:
            return await self._write(
                record.evolve(
                    state=State.CONFIRMED,
                    receipt=obs.receipt or record.receipt,
                    observation=obs,
                    checks=checks,
                    reason=f"confirmed by read-back: {obs.detail}".rstrip(": "),
                    next_step=NextStep.NONE,
                    next_check_at=None,
                )
            )
        if obs.outcome is Outcome.NOT_FOUND:
            since = now - (record.dispatched_at or 0.0)
            if since >= tool.consistency_window:
                return await self._write(
                    record.evolve(
                        state=State.NOT_FOUND,
                        observation=obs,
                        checks=checks,
                        reason=f"not found {since:.1f}s after dispatch (window {tool.consistency_window:g}s)",
                        next_step=NextStep.DISPATCH,
                        next_check_at=None,
                    )
                )
            return await self._write(
                record.evolve(
                    state=State.DISPATCHED,
                    observation=obs,
                    checks=checks,
                    reason="not found yet, inside the consistency window",
                )
            )
        has_read_api = tool.adapter.capabilities.has_read_api
        delay = min(self.settings.recheck_min * 2 ** min(record.checks, 20), self.settings.recheck_max)
        return await self._write(
            record.evolve(
                state=State.UNKNOWN,
                observation=obs,
                checks=checks,
                reason=obs.detail or "read-back inconclusive",
                next_step=NextStep.RECHECK if has_read_api else NextStep.OPERATOR,
                next_check_at=now + delay,
            )
        )

    async def _wait_or_park(self, record: ActionRecord, tool: BoundTool, deadline: float) -> ActionRecord:
        """Not found inside the consistency window: wait for the window (or a short re-check)
        if the deadline allows, else park the action as UNKNOWN until the window has passed."""
        window_end = (record.dispatched_at or 0.0) + tool.consistency_window
        pause = max(0.0, min(window_end - self.clock(), self.settings.recheck_min))
        pause = max(pause, RETRY_PAUSE)
        if self._left(record, deadline) > pause + MIN_CALL_BUDGET:
            await self.sleep(pause)
            return await self._write(record)  # renews the lease
        return await self._park(record, tool)

    async def _park(self, record: ActionRecord, tool: BoundTool) -> ActionRecord:
        window_end = (record.dispatched_at or 0.0) + tool.consistency_window
        return await self._write(
            record.evolve(
                state=State.UNKNOWN,
                reason="not found yet, inside the consistency window; re-checked when it closes",
                next_step=NextStep.RECHECK,
                next_check_at=max(window_end, self.clock() + RETRY_PAUSE),
            )
        )

    # -- helpers -------------------------------------------------------------------------------

    def _call(self, record: ActionRecord, tool: BoundTool) -> ActionCall:
        return ActionCall(
            action_id=record.action_id,
            provider_key=provider_key(record.action_id, record.generation),
            payload=tool.load(record.payload),
            scope=record.scope,
            tool=record.tool,
            tenant=record.tenant,
            attempt=record.attempts,
            receipt=record.receipt,
        )

    def _left(self, record: ActionRecord, deadline: float) -> float:
        """Time left for work: the caller's deadline, and never past our own lease."""
        now = self.clock()
        return min(deadline, record.lease_expires_at) - now

    def _within_key_retention(self, record: ActionRecord, tool: BoundTool) -> bool:
        retention = tool.adapter.capabilities.key_retention
        first = record.created_at
        return retention is None or self.clock() - first < retention * 0.9

    async def _write(self, record: ActionRecord) -> ActionRecord:
        """Writes under our lease; a settled action releases it in the same write."""
        now = self.clock()
        if record.state.terminal:
            fresh = record.evolve(updated_at=now, lease_owner="", lease_expires_at=0.0)
        else:
            fresh = record.evolve(updated_at=now, lease_expires_at=now + self.settings.lease_ttl)
        if not await self.store.update(fresh):
            raise LeaseLost(record.action_id)
        return fresh

    async def release(self, record: ActionRecord) -> ActionRecord:
        if not record.lease_owner:
            return record  # released by the write that settled it
        released = record.evolve(updated_at=self.clock(), lease_owner="", lease_expires_at=0.0)
        if not await self.store.update(released):
            raise LeaseLost(record.action_id)
        return released
