"""rpc/status.py: a transition the action's state refuses reaches the caller as
FAILED_PRECONDITION with an ErrorInfo naming the state and the event, never as INTERNAL."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from effectgate.gateway.core import transitions as t
from effectgate.gateway.model.domain import ActionIdentity, ActionRecord, State
from effectgate.gateway.rpc.status import ANSWERED, DOMAIN, to_status


def test_an_illegal_transition_is_failed_precondition_with_its_state_and_event() -> None:
    who = ActionIdentity("acme", "run", "step", "charge_card", "order:1")
    record = ActionRecord.of(
        who.action_id,
        who,
        payload_type="t",
        payload=b"",
        fingerprint="f",
        state=State.CONFIRMED,
        created_at=1.0,
        updated_at=2.0,
    )
    with pytest.raises(t.IllegalTransition) as caught:
        t.apply(record, t.Approve("ops", "late"), 3.0, t.Policy(30.0, 1.0, 60.0, consistency_window=0.0))
    assert isinstance(caught.value, ANSWERED)  # rpc/admission.py hands it to to_status
    status = to_status(caught.value)
    assert status.code is grpc.StatusCode.FAILED_PRECONDITION
    assert "approve is not allowed in CONFIRMED" in status.details
    raw = dict(status.trailing_metadata)["grpc-status-details-bin"]
    detail = status_pb2.Status.FromString(raw).details[0]
    info = error_details_pb2.ErrorInfo()
    assert detail.Unpack(info)
    assert info.reason == "ILLEGAL_TRANSITION" and info.domain == DOMAIN
    assert dict(info.metadata) == {"state": "CONFIRMED", "event": "approve"}
