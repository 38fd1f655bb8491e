"""Request messages, shared by the async and the sync client."""

from __future__ import annotations

import uuid

from google.protobuf import any_pb2
from google.protobuf.message import Message

from effectgate.client.context import RunContext, current
from effectgate.v1 import gateway_pb2 as pb

# Operator resolutions: what a person established about an UNKNOWN action.
RESOLUTIONS = {
    "CONFIRMED": pb.EFFECT_STATE_CONFIRMED,
    "REJECTED": pb.EFFECT_STATE_REJECTED,
    "NOT_FOUND": pb.EFFECT_STATE_NOT_FOUND,
}


def execute(
    tool: str, payload: Message, scope: str, tool_call_id: str, context: RunContext | None, bypass: bool
) -> pb.ExecuteRequest:
    packed = any_pb2.Any()
    packed.Pack(payload)
    return pb.ExecuteRequest(
        context=(context or current()).to_pb(),
        tool=tool,
        scope=scope,
        payload=packed,
        tool_call_id=tool_call_id or f"call-{uuid.uuid4().hex[:12]}",
        bypass=bypass,
    )


def verify(action_id: str | None, tool: str, scope: str, context: RunContext | None) -> pb.VerifyRequest:
    """By id, or by reference: the run context (default: the current one), tool and scope."""
    if action_id:
        return pb.VerifyRequest(action_id=action_id)
    if not tool or not scope:
        raise ValueError("verify needs an action_id, or tool= and scope= (with the run context)")
    return pb.VerifyRequest(ref=pb.ActionRef(context=(context or current()).to_pb(), tool=tool, scope=scope))


def list_actions(state: int, run_id: str, tool: str, page_size: int, page_token: str) -> pb.ListActionsRequest:
    return pb.ListActionsRequest(
        state=state,  # type: ignore[arg-type]
        run_id=run_id,
        tool=tool,
        page_size=page_size,
        page_token=page_token,
    )


def reconcile(action_id: str, resolution: int | str, note: str, external_id: str) -> pb.ReconcileRequest:
    state = RESOLUTIONS[resolution.upper()] if isinstance(resolution, str) else resolution
    return pb.ReconcileRequest(
        action_id=action_id,
        resolution=state,  # type: ignore[arg-type]
        note=note,
        external_id=external_id,
    )
