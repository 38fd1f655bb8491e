"""effectgate.v1.Operator: approvals, reconciliation, bypass and limit grants, for people.

Only operators get here (rpc/admission.py); each act is recorded on the action with its note.
"""

from __future__ import annotations

from typing import Any

import grpc

from effectgate.gateway.core import LEASE_PATIENCE, LimitsDesk, Operations
from effectgate.gateway.model import ActionRecord, InvalidRequest
from effectgate.gateway.observability import audit_log, limits_log
from effectgate.gateway.rpc.admission import current_principal
from effectgate.gateway.rpc.wire import PB_TO_STATE, Limits, grant_pb, person_action_pb
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc as pb_grpc

Context = grpc.aio.ServicerContext[Any, Any]
# An act that waits for a lease answers IN_FLIGHT this long before the caller's deadline.
ANSWER_MARGIN = 1.0


def _patience(context: Context, most: float) -> float:
    """How long an act may wait for a lease: at most `most`, within the call's deadline."""
    remaining = context.time_remaining()
    return most if remaining is None else max(min(most, remaining - ANSWER_MARGIN), 0.0)


class OperatorService(pb_grpc.OperatorServicer):
    def __init__(self, operations: Operations, limits: Limits, desk: LimitsDesk | None = None) -> None:
        self.operations = operations
        self.limits = limits
        self.desk = desk

    def _shown(self, record: ActionRecord) -> pb.Action:
        """The action as the operator who acted sees it: with its approvals (rpc/wire.py)."""
        return person_action_pb(record, self.operations.protocol.approvals_required(record.tool))

    def _check(self, action_id: str, note: str) -> None:
        if not action_id:
            raise InvalidRequest([("action_id", "must not be empty")])
        self.limits.check_ids([("action_id", action_id)])
        self.limits.check_note("note", note)

    async def Reconcile(self, request: pb.ReconcileRequest, context: Context) -> pb.Action:
        who = current_principal()
        self._check(request.action_id, request.note)
        self.limits.check_ids([("external_id", request.external_id)])
        resolution = PB_TO_STATE.get(request.resolution)
        if resolution is None:
            raise InvalidRequest([("resolution", "must be CONFIRMED, REJECTED or NOT_FOUND")])
        record = await self.operations.reconcile(
            who.tenant,
            request.action_id,
            resolution,
            who.name,
            request.note,
            request.external_id,
            patience=_patience(context, LEASE_PATIENCE),
        )
        audit_log.operator_act("reconcile", who.name, request.note, record)
        return self._shown(record)

    async def Approve(self, request: pb.ApproveRequest, context: Context) -> pb.Action:
        who = current_principal()
        self._check(request.action_id, request.note)
        self.limits.check_ids([("fingerprint", request.fingerprint), ("policy_version", request.policy_version)])
        record, counted = await self.operations.decisions.approve(
            who.tenant,
            request.action_id,
            who.name,
            request.note,
            fingerprint=request.fingerprint,
            policy_version=request.policy_version,
        )
        if counted:  # a repeat by the same principal is answered, not recorded again
            audit_log.operator_act("approve", who.name, request.note, record)
        return self._shown(record)

    async def Deny(self, request: pb.DenyRequest, context: Context) -> pb.Action:
        who = current_principal()
        self._check(request.action_id, request.note)
        record = await self.operations.deny(who.tenant, request.action_id, who.name, request.note)
        return self._shown(audit_log.operator_act("deny", who.name, request.note, record))

    async def GrantBypass(self, request: pb.GrantBypassRequest, context: Context) -> pb.Action:
        who = current_principal()
        self._check(request.action_id, request.note)
        record = await self.operations.grant_bypass(
            who.tenant,
            request.action_id,
            who.name,
            request.note,
            patience=_patience(context, LEASE_PATIENCE),
        )
        audit_log.operator_act("grant_bypass", who.name, request.note, record)
        return self._shown(record)

    async def GrantLimit(self, request: pb.GrantLimitRequest, context: Context) -> pb.GrantLimitResponse:
        who = current_principal()
        self._check(request.action_id, request.note)
        if self.desk is None:
            raise InvalidRequest([("action_id", "this gateway keeps no limits")])
        grant = await self.desk.grant(who.tenant, request.action_id, who.name, request.note)
        limits_log.granted(grant)
        return grant_pb(grant)
