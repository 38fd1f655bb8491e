"""The invariants, checked after every rule against the provider's ledger (the only count of
effects) and what the gateway lets an observer read.

`Ledger` is one snapshot of the simulator's effects. A check that an effect is *missing* (a
CONFIRMED action) uses a snapshot taken after the gateway's states were read; a check that an
effect is *present* (a REJECTED or NOT_FOUND action, an unapproved send) uses one taken before:
effects never disappear, so background work racing the check cannot make it fail falsely.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from effectgate.adapters.stripe.adapter import ACTION_METADATA_KEY
from effectgate.v1 import gateway_pb2 as pb
from tests.model import world as w
from tests.model.expect import TERMINAL, WAITING_FOR_SOMEONE, Logical

S = pb.EffectState


@dataclass(frozen=True)
class Effect:
    action_id: str
    key: str
    intent: str
    amount: int


def effects(ledger: Iterable[Mapping[str, Any]]) -> list[Effect]:
    found = []
    for entry in ledger:
        metadata = entry.get("metadata") or {}
        params = entry.get("params") or {}
        found.append(
            Effect(
                str(metadata.get(ACTION_METADATA_KEY, "")),
                str(entry.get("idempotency_key") or ""),
                str(entry.get("id") or ""),
                int(params.get("amount") or 0),
            )
        )
    return found


class Violation(AssertionError):
    pass


def fail(why: str, action: pb.Action | None = None) -> None:
    where = "" if action is None else f" [{action.action_id} {action.tool} {S.Name(action.state)}: {action.reason}]"
    raise Violation(why + where)


def one_effect_per_action(before: list[Effect], by_id: Mapping[str, list[Logical]]) -> None:
    """At most one effect per logical action, one more per bypass the operators granted."""
    counts = Counter(e.action_id for e in before)
    for action_id, count in counts.items():
        allowed = 1 + sum(logical.bypasses for logical in by_id.get(action_id, []))
        if count > allowed:
            fail(f"{count} effects at the provider for action {action_id} (allowed {allowed})")


def one_effect_per_scope(before: list[Effect], actions: Mapping[str, pb.Action]) -> None:
    """unique = "scope": one action (so one effect) per scope, whatever the run and the step."""
    holders: dict[str, set[str]] = defaultdict(set)
    for effect in before:
        action = actions.get(effect.action_id)
        if action is not None and action.tool == "charge_once":
            holders[action.scope].add(effect.action_id)
    for scope, ids in holders.items():
        if len(ids) > 1:
            fail(f"scope {scope!r} of a unique tool has effects of {len(ids)} actions: {sorted(ids)}")


def outcomes_match_the_provider(actions: Mapping[str, pb.Action], before: list[Effect], after: list[Effect]) -> None:
    """Never CONFIRMED without its effect; never REJECTED or NOT_FOUND while the provider holds
    an effect of the action's current provider key."""
    keys_after = {(e.action_id, e.key): e for e in after}
    keys_before = {(e.action_id, e.key) for e in before}
    for action in actions.values():
        current = (action.action_id, action.provider_key)
        if action.state == pb.EFFECT_STATE_CONFIRMED and action.generation > 0:
            # KNOWN (i31, adapters/stripe): a bypass's new generation is confirmed by the previous
            # generation's PaymentIntent (the read-back searches the action id in metadata, which
            # every generation shares), with or without a second effect. Shrunk: first(charge) ->
            # reconciler_pass -> grant_bypass -> fault(conflict | drop_after_commit) ->
            # execute_with_bypass: CONFIRMED "by read-back" naming the first charge.
            # tests/test_model_regressions.py::test_a_bypass_is_not_confirmed_by_the_first_charge
            if not any(e.action_id == action.action_id for e in after):
                fail("CONFIRMED, but the provider has no effect of the action at all", action)
            continue
        if action.state == pb.EFFECT_STATE_CONFIRMED:
            effect = keys_after.get(current)
            if effect is None:
                fail("CONFIRMED, but the provider has no effect with its provider key", action)
            elif action.receipt.external_id and action.receipt.external_id != effect.intent:
                fail(f"CONFIRMED naming {action.receipt.external_id}, the provider's is {effect.intent}", action)
        if action.state in (pb.EFFECT_STATE_REJECTED, pb.EFFECT_STATE_NOT_FOUND) and current in keys_before:
            fail("settled as no effect while the provider holds one", action)


def approvals_before_sends(new: list[Effect], by_id: Mapping[str, list[Logical]], tools: Mapping[str, str]) -> None:
    """An effect of an approval tool's action appears only after its quorum, never after a
    denial or an expiry."""
    for effect in new:
        if tools.get(effect.action_id) != "charge_approved":
            continue
        logicals = by_id.get(effect.action_id, [])
        if not any(logical.approved for logical in logicals):
            fail(f"action {effect.action_id} was sent without {w.APPROVALS} approvals (model: {logicals})")
        if any(logical.denied or logical.expired for logical in logicals):
            fail(f"action {effect.action_id} was sent after a denial or an expiry")


def limits_hold(
    before: list[Effect], tools: Mapping[str, str], runs: Mapping[str, str], granted: Counter[str], windows: int
) -> None:
    """The budget and the effects per window, and the effects per run, at the provider: the most
    any policy variant allowed, over the windows the clock has touched, plus what operators granted
    (bypasses and limit grants, each one effect past a cap)."""
    charged = [e for e in before if tools.get(e.action_id) == "charge"]
    extra = sum(granted.values())
    if len(charged) > w.MAX_EFFECTS * windows + extra:
        fail(f"{len(charged)} effects of charge in {windows} window(s): the cap is {w.MAX_EFFECTS} (+{extra} granted)")
    spent = sum(e.amount for e in charged)
    if spent > w.MAX_BUDGET * windows + extra * 10_000:
        fail(f"charge spent {spent} in {windows} window(s): the budget is {w.MAX_BUDGET}")
    per_run = Counter(runs.get(e.action_id, "") for e in charged)
    for run_id, count in per_run.items():
        if count > w.MAX_RUN_EFFECTS + granted[run_id]:
            fail(f"run {run_id} made {count} effects of charge: its cap is {w.MAX_RUN_EFFECTS}")


def windows_touched(start: float, now: float) -> int:
    return math.floor(now / w.LIMIT_WINDOW) - math.floor(start / w.LIMIT_WINDOW) + 1


def nothing_lost(actions: Mapping[str, pb.Action]) -> None:
    """After the windows and the leases passed and the reconciler ran: terminal, or waiting for
    someone (docs/states.md)."""
    for action in actions.values():
        if action.state in TERMINAL or action.state in WAITING_FOR_SOMEONE:
            continue
        if action.state == pb.EFFECT_STATE_UNKNOWN and action.next_step == pb.NEXT_STEP_OPERATOR:
            continue
        fail("still unsettled after the windows, the leases and reconciler passes", action)
