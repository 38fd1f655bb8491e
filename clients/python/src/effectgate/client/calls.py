"""The gateway's calls, each described once for both clients: the request message, the RPC that
serves it and whether it may be retried. The functions here carry the public signatures and
docstrings of EffectGateClient's and SyncEffectGateClient's methods (core.py turns each into a
method that awaits or blocks)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message

from effectgate.client.context import RunContext, current
from effectgate.v1 import gateway_pb2 as pb

T = TypeVar("T")

# What a wait waits for (WaitAction's `until`).
UNTIL = {"decided": pb.WAIT_UNTIL_DECIDED, "settled": pb.WAIT_UNTIL_SETTLED}
# The call's own deadline is the wait's plus this: the gateway answers (reached or not) before it.
WAIT_SLACK = 10.0

# Operator resolutions: what a person established about an UNKNOWN action.
RESOLUTIONS = {
    "CONFIRMED": pb.EFFECT_STATE_CONFIRMED,
    "REJECTED": pb.EFFECT_STATE_REJECTED,
    "NOT_FOUND": pb.EFFECT_STATE_NOT_FOUND,
}


@dataclass(frozen=True)
class Call(Generic[T]):
    """One unary RPC that answers with a T."""

    method: str  # its name on the generated stub
    request: Message
    timeout: float | None  # None: the client's default
    # On the Operator service (role: operator). Operator calls are never retried automatically.
    operator: bool = False


@dataclass(frozen=True)
class Listing:
    """ListActions with fixed filters, asked page after page until no page token comes back."""

    state: int
    run_id: str
    tool: str
    page_size: int

    def page(self, token: str = "") -> Call[pb.ListActionsResponse]:
        request = pb.ListActionsRequest(
            state=self.state,  # type: ignore[arg-type]
            run_id=self.run_id,
            tool=self.tool,
            page_size=self.page_size,
            page_token=token,
        )
        return Call("ListActions", request, None)

    def after(self, page: pb.ListActionsResponse) -> Call[pb.ListActionsResponse] | None:
        return self.page(page.next_page_token) if page.next_page_token else None


# -- agent calls --------------------------------------------------------------------------------


def execute(
    tool: str,
    payload: Message,
    *,
    scope: str,
    tool_call_id: str = "",
    context: RunContext | None = None,
    timeout: float | None = None,
    bypass: bool = False,
) -> Call[pb.ExecuteResponse]:
    """Performs `tool` once for the current (run, step, scope). Safe to call again with the
    same context after any error or timeout: the answer is the same action."""
    packed = any_pb2.Any()
    packed.Pack(payload)
    request = pb.ExecuteRequest(
        context=(context or current()).to_pb(),
        tool=tool,
        scope=scope,
        payload=packed,
        tool_call_id=tool_call_id or f"call-{uuid.uuid4().hex[:12]}",
        bypass=bypass,
    )
    return Call("Execute", request, timeout)


def verify(
    action_id: str | None = None,
    *,
    tool: str = "",
    scope: str = "",
    context: RunContext | None = None,
    timeout: float | None = None,
) -> Call[pb.VerifyResponse]:
    """Reads the provider's state back now: by action id, or by (run context, tool, scope); the
    run context defaults to the current one."""
    if action_id:
        return Call("Verify", pb.VerifyRequest(action_id=action_id), timeout)
    if not tool or not scope:
        raise ValueError("verify needs an action_id, or tool= and scope= (with the run context)")
    ref = pb.ActionRef(context=(context or current()).to_pb(), tool=tool, scope=scope)
    return Call("Verify", pb.VerifyRequest(ref=ref), timeout)


def get(action_id: str, *, timeout: float | None = None) -> Call[pb.Action]:
    """One action by id."""
    return Call("GetAction", pb.GetActionRequest(action_id=action_id), timeout)


def pages(*, state: int = 0, run_id: str = "", tool: str = "", page_size: int = 100) -> Listing:
    """ListActions page by page (oldest first) until the gateway gives no page token."""
    return Listing(state, run_id, tool, page_size)


def actions(*, state: int = 0, run_id: str = "", tool: str = "", page_size: int = 100) -> Listing:
    """Every matching action (oldest first), fetched a page at a time."""
    return Listing(state, run_id, tool, page_size)


def history(action_id: str, *, timeout: float | None = None) -> Call[pb.GetActionHistoryResponse]:
    """An action's whole story, oldest first (roles: operator, observer)."""
    return Call("GetActionHistory", pb.GetActionHistoryRequest(action_id=action_id), timeout)


def events(
    *,
    since: float = 0.0,
    until: float = 0.0,
    principal: str = "",
    kind: str = "",
    tool: str = "",
    page_size: int = 100,
    page_token: str = "",
    timeout: float | None = None,
) -> Call[pb.ListEventsResponse]:
    """One page of your tenant's audit trail: every action's events, in the order of the tenant's
    hash chain, each with its link (roles: operator, observer). `since`/`until`: Unix seconds (0:
    unbounded). Pass the answer's `next_page_token` for the next page; an empty page answers the
    token it was asked with, so polling with it follows the trail."""
    request = pb.ListEventsRequest(
        principal=principal, kind=kind, tool=tool, page_size=page_size, page_token=page_token
    )
    if since:
        request.since.FromNanoseconds(int(since * 1e9))
    if until:
        request.until.FromNanoseconds(int(until * 1e9))
    return Call("ListEvents", request, timeout)


def limits(tool: str = "", *, run_id: str = "", timeout: float | None = None) -> Call[pb.GetLimitsResponse]:
    """Each tool's limits for your tenant (or `tool`'s): the caps, what the current window has used
    and what is left; with `run_id`, that run's use of the per-run caps (roles: operator, observer)."""
    return Call("GetLimits", pb.GetLimitsRequest(tool=tool, run_id=run_id), timeout)


def wait(action_id: str, *, until: str = "decided", timeout: float = 30.0) -> Call[pb.WaitActionResponse]:
    """Waits on the gateway until the action is `until` ("decided": no longer waiting for a
    person; "settled": CONFIRMED, REJECTED, NOT_FOUND or UNKNOWN, what an Execute answers) or
    `timeout` seconds (at most 300) have passed. The answer's `reached` says which, its `action`
    is the action then. Writes nothing: safe to call again, from any replica."""
    if until not in UNTIL:
        raise ValueError(f"until must be one of {', '.join(UNTIL)}, not {until!r}")
    if timeout < 0:
        raise ValueError("timeout must not be negative")
    span = duration_pb2.Duration()
    span.FromNanoseconds(int(timeout * 1e9))
    request = pb.WaitActionRequest(action_id=action_id, until=UNTIL[until], timeout=span)
    return Call("WaitAction", request, min(timeout, 300.0) + WAIT_SLACK)


def watch_request(*, state: int = 0, tool: str = "", run_id: str = "", cursor: str = "") -> pb.WatchActionsRequest:
    """WatchActions' request: the filters, and the cursor to resume after ("" : from now)."""
    return pb.WatchActionsRequest(state=state, tool=tool, run_id=run_id, cursor=cursor)  # type: ignore[arg-type]


# -- operator calls (role: operator) --------------------------------------------------------------


def approve(
    action_id: str, *, note: str, fingerprint: str = "", policy_version: str = "", timeout: float | None = None
) -> Call[pb.Action]:
    """Signs off an action that waits for approval; the same principal approving twice is a no-op.
    `fingerprint`, `policy_version`: what you were shown (from `get`); given, the gateway refuses
    the approval (APPROVAL_STALE) if the action or the tool's policy is no longer that."""
    request = pb.ApproveRequest(action_id=action_id, note=note, fingerprint=fingerprint, policy_version=policy_version)
    return Call("Approve", request, timeout, operator=True)


def deny(action_id: str, *, note: str, timeout: float | None = None) -> Call[pb.Action]:
    """Says no to an action that waits for approval: REJECTED, with `note` as the reason the agent reads."""
    return Call("Deny", pb.DenyRequest(action_id=action_id, note=note), timeout, operator=True)


def reconcile(
    action_id: str, *, resolution: int | str, note: str, external_id: str = "", timeout: float | None = None
) -> Call[pb.Action]:
    """Settles an UNKNOWN action: resolution CONFIRMED, REJECTED or NOT_FOUND (a State or name)."""
    state = RESOLUTIONS[resolution.upper()] if isinstance(resolution, str) else resolution
    request = pb.ReconcileRequest(
        action_id=action_id,
        resolution=state,  # type: ignore[arg-type]
        note=note,
        external_id=external_id,
    )
    return Call("Reconcile", request, timeout, operator=True)


def grant_bypass(action_id: str, *, note: str, timeout: float | None = None) -> Call[pb.Action]:
    """Allows one new effect for an action that already has one."""
    return Call("GrantBypass", pb.GrantBypassRequest(action_id=action_id, note=note), timeout, operator=True)


def grant_limit(action_id: str, *, note: str, timeout: float | None = None) -> Call[pb.GrantLimitResponse]:
    """Lets one action past its tool's limits once: the `action_id` a refusal's ErrorInfo names
    (`LimitExceeded.metadata["action_id"]`). The agent's next call of that action is counted
    without the check; the one after is checked again."""
    return Call("GrantLimit", pb.GrantLimitRequest(action_id=action_id, note=note), timeout, operator=True)
