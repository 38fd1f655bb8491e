"""What a model reads after an effect tool ran, shared by the agent-framework helpers: the state,
the action id and what to do next, and for a gateway refusal that nothing new was sent."""

from __future__ import annotations

import json
from typing import Any

import grpc

from effectgate.v1 import gateway_pb2

# Codes after which calling again in the same step is the same action, never a second effect:
# the gateway was unreachable, busy with the same action, or the caller's deadline passed.
SETTLE_LATER = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED, grpc.StatusCode.DEADLINE_EXCEEDED})


def describe(answer: gateway_pb2.ExecuteResponse) -> str:
    """The state, the action id and what to do next."""
    action = answer.action
    state = gateway_pb2.EffectState.Name(action.state).removeprefix("EFFECT_STATE_")
    facts: dict[str, Any] = {"state": state, "action_id": action.action_id, "replayed": answer.replayed}
    if action.receipt.external_id:
        facts["external_id"] = action.receipt.external_id
    if action.reason:
        facts["reason"] = action.reason
    if state == "CONFIRMED":
        advice = "Done."
    elif state == "REJECTED":
        advice = "The provider refused; nothing happened. Tell the user; do not retry with other arguments."
    elif state == "AWAITING_APPROVAL":
        advice = (
            "Waiting for a person to approve it; nothing was sent yet. Do not retry with other arguments "
            "and do not use another tool for the same purpose: call this tool again in the same step later "
            "to get the outcome."
        )
    else:
        advice = (
            "Not proven yet: do not retry with other arguments and do not use another tool for the same "
            "purpose; the operator queue has it."
        )
    return f"{advice} {json.dumps(facts)}"


def refusal(exc: grpc.aio.AioRpcError) -> str:
    return (
        f"effectgate refused the call ({exc.code().name}: {exc.details()}); nothing new was sent. "
        "Do not retry with other arguments."
    )


def settle_later(exc: grpc.aio.AioRpcError) -> str:
    return (
        f"effectgate did not settle the call yet ({exc.code().name}: {exc.details()}). Call this tool again "
        "with the same arguments: it is the same action, never a second effect."
    )
