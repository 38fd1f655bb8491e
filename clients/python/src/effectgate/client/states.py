"""The action states and next steps as Python enums, equal to the wire values
(`answer.action.state == State.CONFIRMED`)."""

from __future__ import annotations

import enum

from effectgate.v1 import gateway_pb2


class State(enum.IntEnum):
    UNSPECIFIED = gateway_pb2.EFFECT_STATE_UNSPECIFIED
    PLANNED = gateway_pb2.EFFECT_STATE_PLANNED
    DISPATCHED = gateway_pb2.EFFECT_STATE_DISPATCHED
    CONFIRMED = gateway_pb2.EFFECT_STATE_CONFIRMED
    REJECTED = gateway_pb2.EFFECT_STATE_REJECTED
    NOT_FOUND = gateway_pb2.EFFECT_STATE_NOT_FOUND
    UNKNOWN = gateway_pb2.EFFECT_STATE_UNKNOWN
    AWAITING_APPROVAL = gateway_pb2.EFFECT_STATE_AWAITING_APPROVAL

    @property
    def settled(self) -> bool:
        """CONFIRMED or REJECTED: the outcome is final and proven."""
        return self in (State.CONFIRMED, State.REJECTED)


class NextStep(enum.IntEnum):
    UNSPECIFIED = gateway_pb2.NEXT_STEP_UNSPECIFIED
    NONE = gateway_pb2.NEXT_STEP_NONE
    RECHECK = gateway_pb2.NEXT_STEP_RECHECK
    OPERATOR = gateway_pb2.NEXT_STEP_OPERATOR
    DISPATCH = gateway_pb2.NEXT_STEP_DISPATCH
    APPROVE = gateway_pb2.NEXT_STEP_APPROVE
