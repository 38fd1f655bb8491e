"""Tool results the model can act on: the action as `structuredContent`, and for every outcome
that is not a proven effect an explanation saying what to do next (`isError: true`). Errors carry
`structuredContent` too: `{"error": {...}}`, with the action's id when the gateway named one.

A receipt's `result` travels as a `google.protobuf.Struct`, whose numbers are doubles; JSON has
one number type, so integral values (within ±2^53, where a double is exact) are written as
integers: an amount reads `1000`, as the provider sent it, never `1000.0`."""

from __future__ import annotations

import json
from typing import Any

import grpc
import mcp_types as types
from google.protobuf import json_format

from effectgate.mcp.gateway_port import GatewayRefusal
from effectgate.v1 import gateway_pb2

_NOT_PROVEN = (
    "not proven yet: the effect may or may not have happened. Do not retry with other arguments "
    "and do not call another tool for the same purpose; the operator queue has it (action {id}). "
    "Calling this tool again in the same step returns this same action."
)
_ADVICE = {
    "CONFIRMED": "done: the provider confirmed the effect (action {id}).",
    "REJECTED": (
        "refused by the provider, nothing happened (action {id}): {reason}. Calling again in the same "
        "step returns this same refusal; tell the user, or ask them for other details."
    ),
    "AWAITING_APPROVAL": (
        "waiting for a person to approve it (action {id}); nothing was sent. {ttl}Do not retry with other "
        "arguments and do not call another tool for the same purpose: call effectgate_wait with this "
        "action_id to wait for the decision, then call this tool again in the same step to get the outcome."
    ),
    "NOT_FOUND": "not sent yet (action {id}): call this tool again in the same step to send it.",
}
_ERROR_STATES = {"REJECTED", "UNKNOWN", "DISPATCHED", "PLANNED", "NOT_FOUND"}
_EXACT = 2**53


def integral(value: Any) -> Any:
    """`value` (a Struct turned into Python) with integral doubles as ints, recursively."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT:
        return int(value)
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral(v) for v in value]
    return value


def state_name(state: gateway_pb2.EffectState.ValueType) -> str:
    return gateway_pb2.EffectState.Name(state).removeprefix("EFFECT_STATE_")


def action_content(action: gateway_pb2.Action, *, replayed: bool) -> dict[str, Any]:
    state = state_name(action.state)
    content: dict[str, Any] = {"state": state, "action_id": action.action_id, "replayed": replayed}
    if action.HasField("receipt"):
        receipt: dict[str, Any] = {
            "external_id": action.receipt.external_id,
            "provider_request_id": action.receipt.provider_request_id,
        }
        if action.receipt.HasField("result"):
            receipt["result"] = integral(json_format.MessageToDict(action.receipt.result))
        content["receipt"] = receipt
    if action.reason:
        content["reason"] = action.reason
    if action.next_step:
        content["next_step"] = gateway_pb2.NextStep.Name(action.next_step).removeprefix("NEXT_STEP_")
    return content


def approval_wait(ttl: str) -> str:
    """How long a person may take, said to the model (the tool's `approval_ttl`)."""
    if not ttl:
        return "A person may take a while; it never expires on its own. "
    return f"A person may take up to {ttl}; after that it expires (REJECTED, never sent). "


def action_result(action: gateway_pb2.Action, *, replayed: bool, approval_ttl: str = "") -> types.CallToolResult:
    content = action_content(action, replayed=replayed)
    state = content["state"]
    if state == "AWAITING_APPROVAL":
        content["approval_ttl"] = approval_ttl
    template = _ADVICE.get(state, _NOT_PROVEN)
    text = template.format(
        id=action.action_id, reason=action.reason or "no reason given", ttl=approval_wait(approval_ttl)
    )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{state}: {text}\n{json.dumps(content)}")],
        structured_content=content,
        is_error=state in _ERROR_STATES,
    )


def tool_error(
    text: str,
    *,
    reason: str,
    retry_same_step: bool = False,
    facts: dict[str, Any] | None = None,
    message: str = "",
) -> types.CallToolResult:
    """An error result; its `structuredContent` names the reason, whether calling again in the same
    step may help, and (in `facts`) the action the gateway named, if any."""
    content: dict[str, Any] = {**(facts or {}), "error": {"reason": reason, "message": message or text}}
    content["error"]["retry_same_step"] = retry_same_step
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=content, is_error=True
    )


def refusal_result(refusal: GatewayRefusal) -> types.CallToolResult:
    """A gateway error as a tool error whose text says what to do. Refusals (mismatch, policy,
    permissions) sent nothing; a lost or timed-out call may have, hence "call again in the same step"."""
    reason = refusal.reason or refusal.code.name
    retry = False
    figures = refusal.metadata
    if reason == "BUDGET_EXCEEDED":
        left = f"{figures.get('left', '?')} {figures.get('currency', '')}".strip()
        advice = (
            f"the spending limit of this tool does not allow it; nothing was sent. Left: {left}"
            + (f", the budget resets at {figures['window_resets_at']}" if "window_resets_at" in figures else "")
            + ". Do not split the amount or retry under another step: tell the user the limit was reached, "
            "or ask them for a smaller amount or for an operator's approval."
        )
    elif reason == "RATE_LIMITED":
        wait = f"{refusal.retry_after:.0f} s" if refusal.retry_after is not None else "the window's end"
        advice = (
            f"this tool's limit of {figures.get('max_effects', '?')} effects per window is used up; nothing "
            f"was sent. Call again in the same step after {wait}, or tell the user it has to wait."
        )
        retry = True
    elif reason == "SCOPE_TAKEN":
        advice = (
            f"this tool allows one effect per business object, and action {figures.get('action_id', '?')} "
            "already exists for it; nothing new was sent. Do not retry: report that action's outcome."
        )
    elif reason == "CIRCUIT_OPEN":
        wait = f"{refusal.retry_after:.0f} s" if refusal.retry_after is not None else "a while"
        advice = (
            f"the provider behind this tool is failing and new calls are paused; nothing was sent. Call again "
            f"in the same step after {wait}, with the same arguments."
        )
        retry = True
    elif reason == "PAYLOAD_MISMATCH":
        advice = (
            "this step already performed this tool with other arguments; nothing new was sent. "
            "Do not retry with other arguments: report the earlier outcome to the user."
        )
    elif reason == "ALREADY_EXECUTED":
        advice = "this step already performed this tool; nothing new was sent. Do not retry."
    elif reason == "GATEWAY_TLS_FAILED":
        advice = (
            "the front door cannot reach the gateway over TLS (a CA that does not sign the gateway's "
            "certificate, a wrong server name or client certificate): a configuration error, nothing was "
            "sent. Do not retry: tell the user this tool is misconfigured."
        )
    elif refusal.code in (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        advice = (
            "the gateway did not settle the call (busy, in flight or unreachable); call again in the same "
            "step later with the same arguments: it is the same action, never a second effect."
        )
        retry = True
    elif refusal.code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
        advice = (
            "this caller may not use this tool, or its token is unknown to the gateway: a configuration "
            "error, nothing was sent. Do not retry."
        )
    else:
        advice = "the gateway refused the call; nothing was sent."
    facts: dict[str, Any] = {}
    # An id the caller asked about and the gateway did not find is not echoed as an action.
    if refusal.metadata.get("action_id") and reason != "ACTION_NOT_FOUND":
        facts["action_id"] = refusal.metadata["action_id"]
    if refusal.metadata.get("state"):
        facts["state"] = refusal.metadata["state"].upper()
    text = f"{reason}: {advice} ({refusal.message})"
    return tool_error(text, reason=reason, retry_same_step=retry, facts=facts, message=f"{reason}: {advice}")
