"""Action states and next steps under short names, typed as the generated enum values, so that
`answer.action.state == State.CONFIRMED` type-checks (mypy --strict) and reads well."""

from __future__ import annotations

from typing import Final

from effectgate.v1 import gateway_pb2 as pb


class State:
    UNSPECIFIED: Final = pb.EFFECT_STATE_UNSPECIFIED
    PLANNED: Final = pb.EFFECT_STATE_PLANNED
    DISPATCHED: Final = pb.EFFECT_STATE_DISPATCHED
    CONFIRMED: Final = pb.EFFECT_STATE_CONFIRMED
    REJECTED: Final = pb.EFFECT_STATE_REJECTED
    NOT_FOUND: Final = pb.EFFECT_STATE_NOT_FOUND
    UNKNOWN: Final = pb.EFFECT_STATE_UNKNOWN
    AWAITING_APPROVAL: Final = pb.EFFECT_STATE_AWAITING_APPROVAL

    @staticmethod
    def name(value: int) -> str:
        """`State.name(action.state)` -> "CONFIRMED"."""
        return pb.EffectState.Name(value).removeprefix("EFFECT_STATE_")  # type: ignore[arg-type]

    @staticmethod
    def value(name: str) -> pb.EffectState.ValueType:
        """`State.value("UNKNOWN")` -> State.UNKNOWN."""
        return pb.EffectState.Value(f"EFFECT_STATE_{name.upper()}")

    @staticmethod
    def names() -> list[str]:
        """Every state but UNSPECIFIED, in wire order."""
        return [n.removeprefix("EFFECT_STATE_") for n in pb.EffectState.keys()[1:]]

    @staticmethod
    def settled(value: int) -> bool:
        """CONFIRMED or REJECTED: final and proven."""
        return value in (State.CONFIRMED, State.REJECTED)


class NextStep:
    UNSPECIFIED: Final = pb.NEXT_STEP_UNSPECIFIED
    NONE: Final = pb.NEXT_STEP_NONE
    RECHECK: Final = pb.NEXT_STEP_RECHECK
    OPERATOR: Final = pb.NEXT_STEP_OPERATOR
    DISPATCH: Final = pb.NEXT_STEP_DISPATCH
    APPROVE: Final = pb.NEXT_STEP_APPROVE
