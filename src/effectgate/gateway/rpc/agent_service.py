"""effectgate.v1.EffectGateway: translates between the wire and the effect protocol."""

from __future__ import annotations

from typing import Any

import grpc

from effectgate.gateway import audit_log
from effectgate.gateway.domain import ListQuery
from effectgate.gateway.errors import InvalidRequest
from effectgate.gateway.keys import action_id as derive_action_id
from effectgate.gateway.protocol import EffectProtocol, ExecuteCommand, validate_context
from effectgate.gateway.rpc.auth import Authenticator
from effectgate.gateway.rpc.handlers import deadline_of, translate_errors
from effectgate.gateway.rpc.wire import PB_TO_STATE, action_pb, observation_pb
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc as pb_grpc

Context = grpc.aio.ServicerContext[Any, Any]
MAX_PAGE_SIZE = 500


class EffectGatewayService(pb_grpc.EffectGatewayServicer):
    def __init__(self, protocol: EffectProtocol, auth: Authenticator) -> None:
        self.protocol = protocol
        self.auth = auth

    @translate_errors
    async def Execute(self, request: pb.ExecuteRequest, context: Context) -> pb.ExecuteResponse:
        principal = self.auth.authenticate(context.invocation_metadata(), "agent")
        if not request.HasField("context"):
            raise InvalidRequest([("context", "the run context is required (run_id, step_id)")])
        if not request.HasField("payload"):
            raise InvalidRequest([("payload", "the tool's typed payload is required")])
        validate_context(request.context.run_id, request.context.step_id, request.tool)
        self.auth.check_tool(principal, request.tool)
        tool = self.protocol.tools.get(request.tool)
        result = await self.protocol.execute(
            ExecuteCommand(
                tenant=principal.tenant,
                run_id=request.context.run_id,
                step_id=request.context.step_id,
                parent_run_id=request.context.parent_run_id,
                agent=request.context.agent,
                tool=request.tool,
                scope=request.scope,
                payload_type_url=request.payload.type_url,
                payload=request.payload.value,
                tool_call_id=request.tool_call_id,
                bypass=request.bypass,
            ),
            deadline=deadline_of(context, tool.config.deadline),
        )
        return pb.ExecuteResponse(action=action_pb(result.record), replayed=result.replayed)

    @translate_errors
    async def Verify(self, request: pb.VerifyRequest, context: Context) -> pb.VerifyResponse:
        principal = self.auth.authenticate(context.invocation_metadata(), "agent")
        target = request.WhichOneof("target")
        if target == "action_id":
            action_id = request.action_id
        elif target == "ref":
            ref = request.ref
            validate_context(ref.context.run_id, ref.context.step_id, ref.tool)
            action_id = derive_action_id(principal.tenant, ref.context.run_id, ref.context.step_id, ref.tool, ref.scope)
        else:
            raise InvalidRequest([("target", "give an action_id or a ref")])
        record, observation = await self.protocol.verify(principal.tenant, action_id)
        audit_log.operator_act("verify", principal.name, "", record)
        return pb.VerifyResponse(action=action_pb(record), observation=observation_pb(observation))

    @translate_errors
    async def GetAction(self, request: pb.GetActionRequest, context: Context) -> pb.Action:
        principal = self.auth.authenticate(context.invocation_metadata(), "agent")
        if not request.action_id:
            raise InvalidRequest([("action_id", "must not be empty")])
        return action_pb(await self.protocol.get(principal.tenant, request.action_id))

    @translate_errors
    async def ListActions(self, request: pb.ListActionsRequest, context: Context) -> pb.ListActionsResponse:
        principal = self.auth.authenticate(context.invocation_metadata(), "agent")
        if request.page_size < 0:
            raise InvalidRequest([("page_size", "must not be negative")])
        page = await self.protocol.list(
            ListQuery(
                tenant=principal.tenant,
                state=PB_TO_STATE.get(request.state),
                run_id=request.run_id,
                tool=request.tool,
                page_size=min(request.page_size or 50, MAX_PAGE_SIZE),
                after=request.page_token,
            )
        )
        return pb.ListActionsResponse(actions=[action_pb(r) for r in page.records], next_page_token=page.next_token)
