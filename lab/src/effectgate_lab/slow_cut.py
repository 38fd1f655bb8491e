"""Writes that land after the cut (issue 38): agents with short deadlines against a provider whose
writes take a random time around the caller's deadline and the gateway's `attempt_timeout`, and
the figures that say whether absence was ever recorded while the provider held the effect.

The simulators here stamp every applied effect with when its request *arrived* (`arrived`), as
well as when it was applied (`at`, the ledger's own field). A `NOT_FOUND` the gateway recorded at
time n is **false** when an effect of that action was applied from a request that arrived before n
(whenever it was applied): the provider held, or was about to hold, what the gateway called absent.
A duplicate is a second effect of one action at the provider; the budget is exact when the
gateway's counters equal what the provider applied.

`study` drives the agents and returns `Figures`; the tests (`tests/test_slow_cut.py`) start the
gateways (one on SQLite, two replicas on PostgreSQL) and check the figures; `make soak` runs them
with 100 actions each.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.simulators.crm_sim import CrmSimulator
from effectgate_lab.simulators.server import AnswerSlot, Commit, JsonDict, SimResponse, SimulatorServer
from effectgate_lab.simulators.stripe_sim import StripeSimulator

SETTLED = (pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED)


class ArrivalLog(SimulatorServer):
    """A simulator that stamps each applied effect with when its request arrived."""

    # Writes taken in whole (the request's body read): from here the simulator applies the write
    # whatever becomes of the caller. The request counter counts a request when its headers arrive,
    # so a caller killed then may never have sent its body.
    taken = 0

    async def write(self, request: web.BaseRequest, commit: Commit, *, slot: AnswerSlot | None = None) -> Any:
        arrived = self.now()
        self.taken += 1

        async def stamped(fault: Any) -> SimResponse:
            before = len(self.ledger)
            answer = await commit(fault)  # the simulators' commits do not await: nothing interleaves
            for entry in self.ledger[before:]:
                entry["arrived"] = arrived
            return answer

        return await super().write(request, stamped, slot=slot)


class SlowStripe(ArrivalLog, StripeSimulator):
    """The Stripe simulator (idempotency keys), with arrival stamps."""


class SlowCrm(ArrivalLog, CrmSimulator):
    """The CRM simulator (no idempotency keys), with arrival stamps."""


@dataclass
class Figures:
    actions: int = 0
    confirmed: int = 0
    # Refused by the gateway's limits before anything was stored or sent.
    limited: int = 0
    other: Counter[str] = field(default_factory=Counter)
    # NOT_FOUND recorded while an effect of the action was (or was about to be) at the provider.
    false_not_found: int = 0
    # Each false NOT_FOUND: the action, when it was recorded, and its effects' (arrived, applied).
    false_cases: list[JsonDict] = field(default_factory=list)
    # Actions whose effect the provider applied later than its declared keeps_processing allows
    # (a simulator lagging under load): the gateway's promise does not cover them.
    overran: list[str] = field(default_factory=list)
    # NOT_FOUND recorded at all (true ones are re-sent), and by which event.
    not_found: int = 0
    not_found_by: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    duplicated: list[str] = field(default_factory=list)
    provider_effects: int = 0
    provider_spend: int = 0
    gateway_effects: int = 0
    gateway_spend: int = 0
    # Effects applied after the caller's cut plus the window: what anchoring the window at the
    # moment the caller stopped waiting would have called absent.
    landed_after_cut_and_window: int = 0
    # The errors agents were answered (code/reason), all calls counted.
    agent_errors: Counter[str] = field(default_factory=Counter)
    # Seconds from an action's first Execute to the agent's settled answer.
    settle: list[float] = field(default_factory=list)

    @property
    def budget_exact(self) -> bool:
        return (self.gateway_effects, self.gateway_spend) == (self.provider_effects, self.provider_spend)

    def summary(self) -> JsonDict:
        times = sorted(self.settle) or [0.0]
        return {
            "actions": self.actions,
            "confirmed": self.confirmed,
            "limited": self.limited,
            "other": dict(self.other),
            "false_not_found": self.false_not_found,
            "not_found": self.not_found,
            "not_found_by": dict(self.not_found_by),
            "agent_errors": dict(self.agent_errors),
            "false_cases": self.false_cases,
            "overran": self.overran,
            "duplicates": self.duplicates,
            "provider": {"effects": self.provider_effects, "spend": self.provider_spend},
            "gateway": {"effects": self.gateway_effects, "spend": self.gateway_spend},
            "budget_exact": self.budget_exact,
            "landed_after_cut_and_window": self.landed_after_cut_and_window,
            "settle_s": {
                "median": round(statistics.median(times), 2),
                "p95": round(times[int(0.95 * (len(times) - 1))], 2),
                "max": round(times[-1], 2),
            },
        }


@dataclass(frozen=True)
class Plan:
    """One study: `n` actions, `deadline` the agents' per-call deadline (the cut), `window` the
    tool's consistency window (for `landed_after_cut_and_window`)."""

    n: int
    deadline: float
    window: float
    # The tool's keeps_processing (to tell a provider that broke its declared bound).
    keeps_processing: float = 0.0
    # Bound of one action's whole life (the agent gives up after it and it counts as `other`).
    patience: float = 60.0
    seed: int = 38


Request = Callable[[int], pb.ExecuteRequest]
# Which action an applied effect belongs to ("" when none of ours), and its amount.
EffectOf = Callable[[JsonDict], tuple[str, int]]


def reason_of(error: grpc.aio.AioRpcError) -> tuple[str, float]:
    """The ErrorInfo reason and the RetryInfo delay of a gateway error ("", 0 when absent)."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    reason, delay = "", 0.0
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            delay = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
    return reason, delay


async def agent(
    stubs: Sequence[gateway_pb2_grpc.EffectGatewayAsyncStub], request: pb.ExecuteRequest, plan: Plan, seen: Counter[str]
) -> tuple[str, pb.Action | None, float]:
    """Calls Execute with the plan's deadline until the action settles, the way an agent that
    follows docs/states.md does: the same run context every time, after the pause it was told.
    Returns (outcome, the last action seen, seconds to settle)."""
    started = time.monotonic()
    turn = random.Random(request.context.run_id).randrange(len(stubs))
    last: pb.Action | None = None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(plan.patience):
            while True:
                stub = stubs[turn % len(stubs)]
                pause = 0.1
                try:
                    answer = await stub.Execute(request, timeout=plan.deadline)
                    last = answer.action
                    if last.state in SETTLED:
                        return pb.EffectState.Name(last.state), last, time.monotonic() - started
                    pause = 0.2
                except grpc.aio.AioRpcError as exc:
                    reason, delay = reason_of(exc)
                    seen[f"{exc.code().name}/{reason}"] += 1
                    if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        return "LIMITED", last, time.monotonic() - started
                    if exc.code() == grpc.StatusCode.UNAVAILABLE:
                        turn += 1  # another replica
                    elif exc.code() not in (grpc.StatusCode.ABORTED, grpc.StatusCode.DEADLINE_EXCEEDED):
                        return f"{exc.code().name}/{reason}", last, time.monotonic() - started
                    pause = max(delay, 0.1)
                await asyncio.sleep(min(pause, 2.0))
    return "GAVE_UP", last, time.monotonic() - started


def arrival(effect: JsonDict) -> float:
    """When the request that made `effect` arrived (its applied time when not stamped)."""
    return float(effect["arrived"] if "arrived" in effect else effect["at"])


def overran(effects: Sequence[JsonDict], ended: Sequence[float], keeps_processing: float) -> bool:
    """Whether the provider applied an effect later than it declared it could: more than
    `keeps_processing` after the call that carried it ended without an answer (`ended`: when the
    gateway recorded each ambiguous end). The gateway's promise holds for a provider that keeps its
    declared bound; a simulator whose event loop lags under load may not (the figures say so)."""
    for effect in effects:
        arrived, applied = arrival(effect), float(effect["at"])
        end = min((at for at in ended if at >= arrived), default=None)
        if end is not None and applied > end + keeps_processing:
            return True
    return False


def false_not_founds(recorded: Sequence[float], arrivals: Sequence[float]) -> int:
    """How many of the NOT_FOUNDs recorded at `recorded` came after a request that the provider
    applied (`arrivals`: when each applied request arrived)."""
    return sum(1 for n in recorded if any(a < n for a in arrivals))


async def study(
    targets: Sequence[str],
    sim: SimulatorServer,
    request_for: Request,
    effect_of: EffectOf,
    plan: Plan,
    *,
    tool: str,
    currency: str = "",
) -> Figures:
    """Runs `plan.n` agents at once against the gateways at `targets`, then reads the provider's
    ledger, the actions' stories and the gateway's counters (GetLimits of `tool`)."""
    channels = [grpc.aio.insecure_channel(t) for t in targets]
    try:
        stubs: list[gateway_pb2_grpc.EffectGatewayAsyncStub] = [gateway_pb2_grpc.EffectGatewayStub(c) for c in channels]
        requests = [request_for(i) for i in range(plan.n)]
        figures = Figures(actions=plan.n)
        runs = await asyncio.gather(*(agent(stubs, r, plan, figures.agent_errors) for r in requests))
        ids: set[str] = set()
        for outcome, action, seconds in runs:
            if outcome == "EFFECT_STATE_CONFIRMED":
                figures.confirmed += 1
                figures.settle.append(seconds)
            elif outcome == "LIMITED":
                figures.limited += 1
            else:
                figures.other[outcome] += 1
            if action is not None:
                ids.add(action.action_id)
        by_action: dict[str, list[JsonDict]] = {}
        for entry in sim.ledger:
            action_id, amount = effect_of(entry)
            if action_id:
                by_action.setdefault(action_id, []).append(entry)
                figures.provider_effects += 1
                figures.provider_spend += amount
        figures.duplicated = sorted(a for a, effects in by_action.items() if len(effects) > 1)
        figures.duplicates = sum(len(effects) - 1 for effects in by_action.values() if len(effects) > 1)
        for action_id in ids | set(by_action):
            story = await stubs[0].GetActionHistory(pb.GetActionHistoryRequest(action_id=action_id), timeout=10)
            steps = [(e.kind, pb.EffectState.Name(e.state), e.at.ToNanoseconds() / 1e9) for e in story.events]
            effects = by_action.get(action_id, [])
            recorded = [at for _, state, at in steps if state == "EFFECT_STATE_NOT_FOUND"]
            figures.not_found += len(recorded)
            figures.not_found_by.update(kind for kind, state, _ in steps if state == "EFFECT_STATE_NOT_FOUND")
            if overran(effects, [at for kind, _, at in steps if kind == "ambiguous"], plan.keeps_processing):
                figures.overran.append(action_id)
            false = false_not_founds(recorded, [arrival(e) for e in effects])
            if false:
                figures.false_not_found += false
                figures.false_cases.append(
                    {
                        "action": action_id,
                        "not_found_at": recorded,
                        "effects": [(e.get("arrived"), e["at"]) for e in effects],
                        "story": steps,
                    }
                )
            figures.landed_after_cut_and_window += sum(
                1 for e in effects if float(e["at"]) > arrival(e) + plan.deadline + plan.window
            )
        limits = await stubs[0].GetLimits(pb.GetLimitsRequest(tool=tool), timeout=10)
        for tool_use in limits.tools:
            for use in tool_use.limits:
                if use.limit == "max_effects":
                    figures.gateway_effects = int(use.used)
                elif use.limit == "budget" and use.currency == currency:
                    figures.gateway_spend = int(use.used)
        return figures
    finally:
        for channel in channels:
            await channel.close(grace=None)
