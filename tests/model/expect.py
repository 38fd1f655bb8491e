"""The plain Python model: what a user of the gateway may expect, built only from the calls the
machine made and the answers it got (never from the gateway's store), and the answers the docs
allow (docs/clients.md's error table, docs/states.md's states).

One `Logical` per logical action as the runtime names it (tool, run, step, scope); under
`unique = "scope"` several of them (other steps on the scope) share one gateway action.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from effectgate.v1 import gateway_pb2 as pb

S = pb.EffectState
TERMINAL = frozenset({pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED})
# States docs/states.md leaves to a person or to the action's own agent once the gateway has
# done all it can: waiting for approval, NOT_FOUND (the next Execute sends it), UNKNOWN that only
# an operator can settle (next_step OPERATOR).
WAITING_FOR_SOMEONE = frozenset({pb.EFFECT_STATE_AWAITING_APPROVAL, pb.EFFECT_STATE_NOT_FOUND})


@dataclass(frozen=True)
class Key:
    tool: str
    run: str
    step: str
    scope: str


@dataclass
class Logical:
    key: Key
    amount: int
    card: str = "pm_card_visa"
    action_id: str = ""
    # Approvals the gateway accepted, the policy variant they were given under (the action is
    # bound to one policy digest: an approval under another starts the count again), and whether
    # they reached the quorum.
    approvals: set[str] = field(default_factory=set)
    approval_variant: int | None = None
    approved: bool = False
    denied: bool = False
    expired: bool = False
    # Bypass grants the gateway accepted: each allows one more effect (a new generation).
    bypasses: int = 0
    # A terminal outcome an answer reported, and the receipt's external id for CONFIRMED.
    settled: int = 0
    external_id: str = ""
    # Refused by a limit: the id the refusal named (for GrantLimit), and grants accepted.
    refused_id: str = ""
    limit_grants: int = 0


@dataclass(frozen=True)
class Answer:
    """An RPC's outcome: OK with an action (or None), or an error's code and reason."""

    code: grpc.StatusCode
    reason: str = ""
    action: pb.Action | None = None
    replayed: bool = False
    metadata: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return self.code == grpc.StatusCode.OK

    def meta(self, name: str) -> str:
        return dict(self.metadata).get(name, "")

    def __str__(self) -> str:
        if self.ok and self.action is not None:
            return f"OK {S.Name(self.action.state)} ({self.action.reason})"
        return f"{self.code.name} {self.reason}"


# Errors an agent's Execute may get on a valid request, whatever the situation (docs/clients.md):
# another caller drives the action, the provider asked to wait, the caller's deadline passed.
ANY_EXECUTE: frozenset[tuple[grpc.StatusCode, str]] = frozenset(
    {
        (grpc.StatusCode.ABORTED, "IN_FLIGHT"),
        (grpc.StatusCode.UNAVAILABLE, "PROVIDER_RATE_LIMITED"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, ""),
    }
)
LIMITS = frozenset(
    {(grpc.StatusCode.RESOURCE_EXHAUSTED, "BUDGET_EXCEEDED"), (grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED")}
)
MISMATCH = (grpc.StatusCode.FAILED_PRECONDITION, "PAYLOAD_MISMATCH")
# An operator's call on an action in a state that does not allow it (docs/decisions.md).
OPERATOR_REFUSALS = frozenset({grpc.StatusCode.FAILED_PRECONDITION})


def execute_allowed(answer: Answer, *, limited: bool, mismatch: bool, bypass: bool) -> str:
    """'' if docs/clients.md allows `answer` to an Execute, else why not."""
    if answer.ok:
        action = answer.action
        if action is None or not action.action_id:
            return "an OK answer without an action"
        if action.state == pb.EFFECT_STATE_UNSPECIFIED:
            return "an action with no state"
        if mismatch:
            return "another payload on a stored action was not refused PAYLOAD_MISMATCH"
        return ""
    pair = (answer.code, answer.reason)
    if pair in ANY_EXECUTE or (limited and pair in LIMITS) or (mismatch and pair == MISMATCH):
        return ""
    if bypass and answer.code == grpc.StatusCode.FAILED_PRECONDITION:
        return ""  # BYPASS_NOT_GRANTED, NOT_SETTLED: the state or the policy forbids it
    return f"{answer.code.name} {answer.reason!r} is not an answer docs/clients.md gives this call"


def operator_allowed(answer: Answer) -> str:
    if answer.ok or answer.code in OPERATOR_REFUSALS:
        return ""
    return f"operator call answered {answer.code.name} {answer.reason!r}"
