"""Every edge of the action state machine, table-driven: one case per (state, event, state) of
`transitions.EDGES` (and no edge without a case), every event refused in every other state,
`allows` equal to the table (and the named state sets the guards rely on), the driver's
next-move rules (`moves`), and docs/protocol.md's diagram equal to the table."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from effectgate.adapters.base import Observation, Outcome, Receipt
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.transitions import moves as m
from effectgate.gateway.model.domain import IN_DOUBT, TERMINAL, UNSENT, ActionIdentity, ActionRecord, NextStep, State

NOW = 10_000.0
POLICY = t.Policy(lease_ttl=30.0, recheck_min=2.0, recheck_max=60.0, consistency_window=5.0, dedups_on_key=True)
WHO = ActionIdentity("acme", "run-1", "step-1", "charge_card", "order:1", agent="a", tool_call_id="c1")
RECEIPT = Receipt(external_id="ch_1", at=NOW)
FOUND = Observation(Outcome.CONFIRMED, detail="found", receipt=RECEIPT, at=NOW)
MISSING = Observation(Outcome.NOT_FOUND, detail="no match", at=NOW)
UNSURE = Observation.unknown("read API down")


def base(state: State, **changes: Any) -> ActionRecord:
    record = ActionRecord.of(
        WHO.action_id,
        WHO,
        payload_type="effectgate.tools.v1.ChargeCard",
        payload=b"\x08\x01",
        fingerprint="sha256:x",
        state=state,
        created_at=NOW - 100,
        updated_at=NOW - 50,
        fence=2,
        lease_owner="w1",
        lease_expires_at=NOW + 20,
        attempts=1 if state is not State.PLANNED else 0,
        dispatched_at=NOW - 10,
        checks=1,
    )
    return record.evolve(**changes)


def claim(**changes: Any) -> t.Claim:
    fields: dict[str, Any] = {
        "identity": WHO,
        "action_id": WHO.action_id,
        "payload_type": "effectgate.tools.v1.ChargeCard",
        "payload": b"\x08\x01",
        "fingerprint": "sha256:x",
        "owner": "w1",
    }
    fields.update(changes)
    return t.Claim(**fields)


@dataclass(frozen=True)
class Case:
    src: State | None
    event: t.Event
    dst: State
    # Expected field values of the result.
    expect: dict[str, Any] = field(default_factory=dict)
    # Changes to the base record before the event.
    given: dict[str, Any] = field(default_factory=dict)
    policy: t.Policy = POLICY


P, D, C, R, N, U, A = (
    State.PLANNED,
    State.DISPATCHED,
    State.CONFIRMED,
    State.REJECTED,
    State.NOT_FOUND,
    State.UNKNOWN,
    State.AWAITING_APPROVAL,
)
NO_READ_API = t.Policy(lease_ttl=30.0, recheck_min=2.0, recheck_max=60.0, consistency_window=5.0, has_read_api=False)

TWO_PEOPLE = t.Policy(lease_ttl=30.0, recheck_min=2.0, recheck_max=60.0, consistency_window=5.0, approvals=2)

CASES = {
    "claim-planned": Case(None, claim(), P, {"attempts": 0, "lease_owner": "w1", "lease_expires_at": NOW + 30}),
    "claim-dispatched": Case(
        None, claim(send_now=True), D, {"attempts": 1, "dispatched_at": NOW, "fence": 1, "lease_owner": "w1"}
    ),
    "claim-approval": Case(
        None, claim(approval=True, send_now=True), A, {"next_step": NextStep.APPROVE, "lease_owner": ""}
    ),
    "approve": Case(A, t.Approve("ops", "ok"), P, {"reason": "approved by ops", "notes": ("approved by ops: ok",)}),
    # Two people: the first of two approvals counts and the action keeps waiting.
    "approve-one-of-two": Case(
        A,
        t.Approve("ops", "ok"),
        A,
        {"approvals": ("ops",), "next_step": NextStep.APPROVE},
        {"next_step": NextStep.APPROVE},
        TWO_PEOPLE,
    ),
    "deny": Case(
        A, t.Deny("ops", "wrong customer"), R, {"reason": "denied by ops: wrong customer", "next_step": NextStep.NONE}
    ),
    "expire": Case(A, t.Expire(600.0), R, {"reason": "approval expired after 10m", "next_step": NextStep.NONE}),
    # Approved under a policy the tool no longer has, not yet sent: it waits for a new approval.
    "reapprove": Case(
        P,
        t.Reapprove("pv_new"),
        A,
        {"approvals": (), "policy_version": "pv_new", "next_step": NextStep.APPROVE},
        {"approvals": ("ops",), "policy_version": "pv_old"},
    ),
    # Approved, then proven never sent (NOT_FOUND) under a policy the tool no longer has: it waits
    # for a new approval rather than being sent again (found by the simulator's redeploy, seed 28).
    "reapprove-not-found": Case(
        N,
        t.Reapprove("pv_new"),
        A,
        {"approvals": (), "policy_version": "pv_new", "next_step": NextStep.APPROVE},
        {"approvals": ("ops",), "policy_version": "pv_old"},
    ),
    "dispatch-planned": Case(P, t.Dispatch(), D, {"attempts": 1, "dispatched_at": NOW, "checks": 0}),
    "dispatch-not-found": Case(N, t.Dispatch(), D, {"attempts": 2, "next_step": NextStep.NONE}),
    "dispatch-same-key": Case(D, t.Dispatch(), D, {"attempts": 2, "dispatched_at": NOW}),
    "not-sent": Case(D, t.NotSent(), D, {"reason": "no time left to send", "attempts": 1}),
    "receipt": Case(D, t.Answered(RECEIPT), C, {"receipt": RECEIPT, "reason": "receipt"}),
    "refused": Case(
        D,
        t.Refused("card_declined", "declined", {"decline_code": "x"}),
        R,
        {"reason": "rejected by provider: declined"},
    ),
    # The edge the old diagram missed: a refusal before acting proves that nothing happened.
    "refused-before-acting": Case(
        D,
        t.RefusedBeforeActing("rate limited", retry_after=2.0),
        N,
        {"next_step": NextStep.DISPATCH, "next_check_at": NOW + 2},
    ),
    # A same-key retry refused before acting says nothing of the attempt before it (issue 38).
    "refused-before-acting-over-doubt": Case(
        D,
        t.RefusedBeforeActing("rate limited", retry_after=2.0, over_doubt=True),
        D,
        {"attempt_ended_at": NOW, "next_check_at": NOW + 2, "next_step": NextStep.NONE},
    ),
    "ambiguous": Case(D, t.Ambiguous("reset"), D, {"reason": "ambiguous: reset"}),
    "observed-confirmed": Case(D, t.Observed(FOUND), C, {"receipt": RECEIPT, "checks": 2, "next_check_at": None}),
    "observed-not-found-after-window": Case(
        D, t.Observed(MISSING), N, {"next_step": NextStep.DISPATCH}, {"dispatched_at": NOW - 5}
    ),
    "observed-not-found-inside-window": Case(
        D, t.Observed(MISSING), D, {"observation": MISSING}, {"dispatched_at": NOW - 4.999}
    ),
    "observed-unknown": Case(
        D, t.Observed(UNSURE), U, {"next_step": NextStep.RECHECK, "next_check_at": NOW + 4.0, "checks": 2}
    ),
    "unknown-observed-confirmed": Case(U, t.Observed(FOUND), C, {"next_step": NextStep.NONE}),
    "unknown-observed-not-found": Case(U, t.Observed(MISSING), N, {"next_step": NextStep.DISPATCH}),
    "unknown-observed-inside-window": Case(U, t.Observed(MISSING), D, {}, {"dispatched_at": NOW - 1}),
    "unknown-observed-unknown-no-read-api": Case(
        U, t.Observed(UNSURE), U, {"next_step": NextStep.OPERATOR}, {"checks": 30}, NO_READ_API
    ),
    # Missed by the old diagram: not found inside the window with no time to wait is parked.
    "park": Case(D, t.Park(), U, {"next_step": NextStep.RECHECK, "next_check_at": NOW + 4}, {"dispatched_at": NOW - 1}),
    "reconcile-unknown-confirmed": Case(
        U, t.Reconcile(C, "ops", "seen in dashboard", "ch_9"), C, {"next_step": NextStep.NONE}
    ),
    "reconcile-unknown-rejected": Case(U, t.Reconcile(R, "ops", "refunded"), R, {"reason": "reconciled by ops"}),
    # Missed by the old diagram: an operator proves absence, the next Execute dispatches again.
    "reconcile-unknown-not-found": Case(U, t.Reconcile(N, "ops", "not there"), N, {"next_step": NextStep.DISPATCH}),
    "reconcile-dispatched-confirmed": Case(D, t.Reconcile(C, "ops", "seen"), C, {"receipt": None}),
    "reconcile-dispatched-rejected": Case(D, t.Reconcile(R, "ops", "no"), R, {}),
    "reconcile-dispatched-not-found": Case(D, t.Reconcile(N, "ops", "absent"), N, {}),
    "grant-confirmed": Case(C, t.GrantBypass("ops", "again"), C, {"bypass_granted": True}),
    "grant-rejected": Case(R, t.GrantBypass("ops", "again"), R, {"bypass_granted": True}),
    # A refund reported by the provider's webhook: history only, the state stays.
    "provider-note-confirmed": Case(
        C,
        t.ProviderNote("stripe", "evt_1", "refunded", "amount_refunded=1250"),
        C,
        {"notes": ("refunded reported by stripe (event evt_1): amount_refunded=1250",), "state": C},
    ),
    # Missed by the old diagram: a used bypass starts a new generation from PLANNED.
    "use-bypass-confirmed": Case(
        C, t.UseBypass(), P, {"generation": 1, "bypass_granted": False, "receipt": None}, {"bypass_granted": True}
    ),
    "use-bypass-rejected": Case(R, t.UseBypass(), P, {"generation": 1}, {"bypass_granted": True}),
}


def run(case: Case) -> ActionRecord:
    if case.src is None:
        assert isinstance(case.event, t.Claim)
        return t.create(case.event, NOW, case.policy)
    return t.apply(base(case.src, **case.given), case.event, NOW, case.policy)


def test_every_edge_has_a_case_and_every_case_is_an_edge() -> None:
    covered = {(c.src, c.event.name, c.dst) for c in CASES.values()}
    assert covered == t.EDGES


@pytest.mark.parametrize("name", sorted(CASES))
def test_edge(name: str) -> None:
    case = CASES[name]
    result = run(case)
    assert result.state is case.dst
    for key, value in case.expect.items():
        assert getattr(result, key) == value, key
    assert result.identity == WHO  # no transition touches who asked for what
    if case.src is not None:
        before = base(case.src, **case.given)
        # The lease is the writer's business, never a transition's.
        assert (result.fence, result.lease_owner, result.lease_expires_at) == (
            before.fence,
            before.lease_owner,
            before.lease_expires_at,
        )


SAMPLE_EVENTS = {type(c.event): c.event for c in CASES.values() if c.src is not None}


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (s, e)
        for s, e in itertools.product(State, SAMPLE_EVENTS.values())
        if (s, e.name) not in {(src, name) for src, name, _ in t.EDGES}
    ],
    ids=lambda v: v.value if isinstance(v, State) else v.name,
)
def test_every_other_event_is_refused(state: State, event: t.Event) -> None:
    with pytest.raises(t.IllegalTransition):
        t.apply(base(state, bypass_granted=True), event, NOW, POLICY)


def test_allows_is_the_table() -> None:
    names = {name for _, name, _ in t.EDGES} | {"no_such_event"}
    for state, name in itertools.product(State, names):
        assert t.allows(state, name) == any(src is state and n == name for src, n, _ in t.EDGES), (state, name)


def test_the_named_state_sets_are_the_tables() -> None:
    def allowing(event: type[t.Event]) -> set[State]:
        return {s for s in State if t.allows(s, event.name)}

    assert allowing(t.Approve) == {State.AWAITING_APPROVAL}
    assert allowing(t.Reconcile) == allowing(t.Observed) == IN_DOUBT
    assert allowing(t.GrantBypass) == allowing(t.UseBypass) == TERMINAL
    assert allowing(t.Dispatch) - {State.DISPATCHED} == UNSENT
    assert all(s.terminal == (s in TERMINAL) for s in State)


def test_a_refused_event_names_the_state_and_the_event() -> None:
    with pytest.raises(t.IllegalTransition) as caught:
        t.apply(base(State.CONFIRMED), t.Reconcile(State.REJECTED, "ops", "late"), NOW, POLICY)
    assert caught.value.state is State.CONFIRMED and caught.value.event == "reconcile"


def test_operator_cannot_resolve_to_a_non_final_state() -> None:
    with pytest.raises(t.IllegalTransition):
        t.apply(base(U), t.Reconcile(D, "ops", "?"), NOW, POLICY)


def test_bypass_without_grant_is_refused() -> None:
    with pytest.raises(t.IllegalTransition):
        t.apply(base(C), t.UseBypass(), NOW, POLICY)


def test_unknown_recheck_backs_off_and_is_capped() -> None:
    delays = [
        t.apply(base(D, checks=n), t.Observed(UNSURE), NOW, POLICY).next_check_at - NOW  # type: ignore[operator]
        for n in range(8)
    ]
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


def test_stamped_renews_the_lease_and_settled_releases_it() -> None:
    assert t.stamped(base(D), NOW, POLICY).lease_expires_at == NOW + 30
    settled = t.stamped(base(C), NOW, POLICY)
    assert (settled.lease_owner, settled.lease_expires_at, settled.updated_at) == ("", 0.0, NOW)
    assert t.released(base(D), NOW).lease_owner == ""


# -- next_move -------------------------------------------------------------------------------------


def move(record: ActionRecord, **kw: Any) -> m.Move:
    args: dict[str, Any] = {
        "now": NOW,
        "deadline": NOW + 10,
        "sends_left": 3,
        "observed": None,
        "refusal": None,
        "refusals": 0,
        "policy": POLICY,
    }
    args.update(kw)
    return m.next_move(record, **args)


LIMITED = t.RefusedBeforeActing("429", retry_after=3.0)
PLAIN = t.RefusedBeforeActing("401")
NO_DEDUP = t.Policy(lease_ttl=30.0, recheck_min=2.0, recheck_max=60.0, consistency_window=5.0)

MOVES: dict[str, tuple[ActionRecord, dict[str, Any], m.Move]] = {
    "planned-sends": (base(P), {}, m.Move("send")),
    "no-sends-left-stops": (base(N), {"sends_left": 0}, m.Move("stop")),
    "no-time-left-stops": (base(P), {"deadline": NOW + 0.01}, m.Move("stop")),
    "lease-bounds-the-time": (base(P, lease_expires_at=NOW + 0.01), {}, m.Move("stop")),
    "rate-limit-pauses-then-sends": (base(N), {"refusal": LIMITED, "refusals": 1}, m.Move("send", pause=3.0)),
    "rate-limit-past-deadline-stops": (
        base(N),
        {"refusal": LIMITED, "refusals": 1, "deadline": NOW + 3.0},
        m.Move("stop", pause=3.0, rate_limited=True),
    ),
    "stored-pause-is-honoured": (base(N, next_check_at=NOW + 4), {}, m.Move("send", pause=4.0)),
    "stored-pause-past-deadline-stops": (
        base(N, next_check_at=NOW + 40),
        {},
        m.Move("stop", pause=40.0, rate_limited=True),
    ),
    "stored-pause-over-sends": (base(N, next_check_at=NOW - 1), {}, m.Move("send")),
    "plain-refusal-backs-off": (base(N), {"refusal": PLAIN, "refusals": 1}, m.Move("send", pause=0.2)),
    "plain-refusal-backs-off-more": (base(N), {"refusal": PLAIN, "refusals": 3}, m.Move("send", pause=0.8)),
    "plain-refusal-no-time-stops-quietly": (
        base(N),
        {"refusal": PLAIN, "refusals": 1, "deadline": NOW + 0.1},
        m.Move("stop", pause=0.2),
    ),
    "dispatched-is-checked": (base(D), {}, m.Move("check")),
    "unknown-is-checked": (base(U), {}, m.Move("check")),
    # The call outlived the caller's deadline: a read now proves nothing, the reconciler checks later.
    "attempt-past-the-deadline-parks": (base(D), {"deadline": NOW - 0.5}, m.Move("park")),
    "unknown-after-check-stops": (base(U), {"observed": UNSURE}, m.Move("stop")),
    "not-found-at-dedup-provider-resends": (base(D), {"observed": MISSING}, m.Move("send", pause=t.RETRY_PAUSE)),
    # Approved under a policy the tool no longer has: no same-key retry before absence is proven.
    "not-found-approved-under-an-old-policy-waits": (
        base(D, dispatched_at=NOW - 1),
        {"observed": MISSING, "same_key_retry": False},
        m.Move("wait", pause=2.0),
    ),
    "not-found-elsewhere-waits": (
        base(D, dispatched_at=NOW - 1),
        {"observed": MISSING, "policy": NO_DEDUP},
        m.Move("wait", pause=2.0),
    ),
    "wait-at-most-to-window-end": (
        base(D, dispatched_at=NOW - 4.5),
        {"observed": MISSING, "policy": NO_DEDUP},
        m.Move("wait", pause=0.5),
    ),
    "no-time-to-wait-parks": (
        base(D, dispatched_at=NOW - 1),
        {"observed": MISSING, "policy": NO_DEDUP, "deadline": NOW + 1},
        m.Move("park"),
    ),
    "key-forgotten-waits": (
        base(D, created_at=NOW - 100, dispatched_at=NOW - 1),
        {"observed": MISSING, "policy": t.Policy(30.0, 2.0, 60.0, 5.0, dedups_on_key=True, key_retention=100.0)},
        m.Move("wait", pause=2.0),
    ),
    "settled-stops": (base(C), {}, m.Move("stop")),
    "awaiting-approval-stops": (base(A), {}, m.Move("stop")),
}


@pytest.mark.parametrize("name", sorted(MOVES))
def test_next_move(name: str) -> None:
    record, kw, expected = MOVES[name]
    assert move(record, **kw) == expected


# -- the diagram -----------------------------------------------------------------------------------


def test_protocol_doc_diagram_is_the_table() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "protocol.md").read_text()
    assert f"```mermaid\n{t.mermaid()}\n```" in doc, "regenerate with: python -m effectgate.gateway.core.transitions"
    for src, name, dst in t.EDGES:
        assert f"{'[*]' if src is None else src.value} --> {dst.value} : {name}" in doc


# -- the consistency window counts from the end of the attempt, and reads by when they were sent --

SLOW_CALLS = t.Policy(lease_ttl=30.0, recheck_min=2.0, recheck_max=60.0, consistency_window=5.0, attempt_timeout=8.0)


def test_an_ambiguous_answer_records_when_the_attempt_ended() -> None:
    dispatched = t.apply(base(State.PLANNED, dispatched_at=None), t.Dispatch(), NOW - 6, SLOW_CALLS)
    assert dispatched.attempt_ended_at is None
    lost = t.apply(dispatched, t.Ambiguous("timeout"), NOW - 3, SLOW_CALLS)
    assert lost.attempt_ended_at == NOW - 3 and t.absence_provable_at(lost, SLOW_CALLS) == NOW + 2
    # The dispatch was 6 s ago, longer than the window: still not proof, the call ended 3 s ago.
    assert t.apply(lost, t.Observed(MISSING, read_at=NOW), NOW, SLOW_CALLS).state is State.DISPATCHED
    assert t.apply(lost, t.Observed(MISSING, read_at=NOW + 2), NOW + 2, SLOW_CALLS).state is State.NOT_FOUND
    again = t.apply(lost.evolve(state=State.NOT_FOUND), t.Dispatch(), NOW + 3, SLOW_CALLS)
    assert again.attempt_ended_at is None  # a new attempt: its end is not known yet


def test_a_read_proves_absence_by_when_it_was_sent_not_when_it_came_back() -> None:
    lost = base(State.DISPATCHED, dispatched_at=NOW - 10, attempt_ended_at=NOW - 6)
    # Sent 1 s before the window closed, answered after it: the provider may have read old state.
    late_answer = t.apply(lost, t.Observed(MISSING, read_at=NOW - 2), NOW + 3, SLOW_CALLS)
    assert late_answer.state is State.DISPATCHED
    assert t.apply(lost, t.Observed(MISSING, read_at=NOW - 1), NOW + 3, SLOW_CALLS).state is State.NOT_FOUND


def test_after_a_crash_the_window_counts_from_the_end_of_the_calls_budget() -> None:
    # The worker died mid-call: the provider may have committed until the attempt's timeout.
    orphan = base(State.DISPATCHED, dispatched_at=NOW - 10, attempt_ended_at=None)
    assert t.provider_done_by(orphan, SLOW_CALLS) == NOW - 2 and t.absence_provable_at(orphan, SLOW_CALLS) == NOW + 3
    assert t.apply(orphan, t.Observed(MISSING, read_at=NOW), NOW, SLOW_CALLS).state is State.DISPATCHED
    assert t.apply(orphan, t.Observed(MISSING, read_at=NOW + 3), NOW + 3, SLOW_CALLS).state is State.NOT_FOUND


# -- the provider may go on applying a request after our call ended (issue 38) --------------------

KEEPS_ON = t.Policy(
    lease_ttl=30.0, recheck_min=2.0, recheck_max=60.0, consistency_window=5.0, attempt_timeout=8.0, keeps_processing=4.0
)


def test_absence_counts_from_when_the_provider_is_done_not_from_when_we_stopped_waiting() -> None:
    # The call timed out 3 s ago; the provider may still apply it for 4 s after that, then reads
    # may lag 5 s: a read sent at NOW + 6 proves absence, one sent at NOW + 5.9 does not.
    lost = base(State.DISPATCHED, dispatched_at=NOW - 11, attempt_ended_at=NOW - 3)
    assert t.provider_done_by(lost, KEEPS_ON) == NOW + 1
    assert t.absence_provable_at(lost, KEEPS_ON) == NOW + 6
    early = t.apply(lost, t.Observed(MISSING, read_at=NOW + 5.9), NOW + 6, KEEPS_ON)
    assert early.state is State.DISPATCHED and early.reason == "not found yet, inside the consistency window"
    proved = t.apply(lost, t.Observed(MISSING, read_at=NOW + 6), NOW + 6, KEEPS_ON)
    assert proved.state is State.NOT_FOUND
    assert proved.reason == "not found 9.0s after the attempt ended (4s to finish + window 5s)"


def test_after_a_crash_the_bound_counts_from_the_end_of_the_calls_budget() -> None:
    orphan = base(State.DISPATCHED, dispatched_at=NOW - 10, attempt_ended_at=None)
    assert t.provider_done_by(orphan, KEEPS_ON) == NOW + 2  # dispatched + attempt_timeout + bound
    assert t.apply(orphan, t.Observed(MISSING, read_at=NOW + 6.9), NOW + 7, KEEPS_ON).state is State.DISPATCHED
    assert t.apply(orphan, t.Observed(MISSING, read_at=NOW + 7), NOW + 7, KEEPS_ON).state is State.NOT_FOUND


def test_a_park_rechecks_when_absence_becomes_provable() -> None:
    lost = base(State.DISPATCHED, dispatched_at=NOW - 11, attempt_ended_at=NOW - 3)
    parked = t.apply(lost, t.Park(), NOW, KEEPS_ON)
    assert parked.state is State.UNKNOWN and parked.next_check_at == NOW + 6


def test_a_webhooks_failure_event_inside_the_bound_is_not_absence() -> None:
    # A failure event is applied as an Observed (core/provider/reports.py): the same rule.
    lost = base(State.UNKNOWN, dispatched_at=NOW - 11, attempt_ended_at=NOW - 3)
    failed = Observation(Outcome.NOT_FOUND, detail="payment_intent.payment_failed", evidence={"source": "webhook"})
    assert t.apply(lost, t.Observed(failed, read_at=NOW), NOW, KEEPS_ON).state is State.DISPATCHED
    assert t.apply(lost, t.Observed(failed, read_at=NOW + 6), NOW + 6, KEEPS_ON).state is State.NOT_FOUND


def test_the_same_principal_twice_counts_once_and_a_new_policy_restarts_the_count() -> None:
    once = t.apply(base(A, next_step=NextStep.APPROVE), t.Approve("ops", "ok"), NOW, TWO_PEOPLE)
    twice = t.apply(once, t.Approve("ops", "again"), NOW, TWO_PEOPLE)
    assert twice.state is A and twice.approvals == ("ops",)
    # The tool's policy changed while it waited: approvals under the old one no longer count.
    rebound = t.apply(twice.evolve(policy_version="pv_old"), t.Approve("eve", "ok", "pv_new"), NOW, TWO_PEOPLE)
    assert rebound.state is A and rebound.approvals == ("eve",) and rebound.policy_version == "pv_new"
    done = t.apply(rebound, t.Approve("ops", "ok", "pv_new"), NOW, TWO_PEOPLE)
    assert done.state is P and done.approvals == ("eve", "ops")


def test_the_reconcilers_sends_are_what_is_left_but_a_planned_action_is_sent_once() -> None:
    """A NOT_FOUND action whose generation used its `max_attempts` rests for its agent; one
    approved again after that (a policy change: reapprove from NOT_FOUND) is PLANNED, and the
    reconciler sends it once rather than leasing it every pass (the simulator's seed 1591)."""
    spent = base(State.NOT_FOUND, attempts=3)
    assert m.reconciler_sends(spent, 3) == 0
    assert m.reconciler_sends(base(State.NOT_FOUND, attempts=1), 3) == 2
    assert m.reconciler_sends(base(State.PLANNED, attempts=3), 3) == 1
    assert m.reconciler_sends(base(State.PLANNED, attempts=0), 3) == 3
