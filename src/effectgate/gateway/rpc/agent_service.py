"""effectgate.v1.EffectGateway: translates between the wire and the effect protocol.

Auth and error translation are wrapped around each handler (rpc/admission.py); here the request is checked for shape
and size, turned into a domain command, and the answer back into messages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any, ClassVar

import grpc

from effectgate.gateway.core import EffectProtocol, ExecuteCommand, LimitsDesk, Watch, masked_payload, validate_context
from effectgate.gateway.model import ActionIdentity, InvalidRequest, ListQuery
from effectgate.gateway.observability import audit_log
from effectgate.gateway.rpc.auth import Authenticator, current_principal
from effectgate.gateway.rpc.handlers import deadline_of
from effectgate.gateway.rpc.limits import Limits, fit_page
from effectgate.gateway.rpc.wire import (
    PB_TO_STATE,
    action_pb,
    detailed_action_pb,
    event_pb,
    execute_answer,
    observation_pb,
    replay_answer,
    tool_limits_pb,
)
from effectgate.v1 import gateway_pb2 as pb

Context = grpc.aio.ServicerContext[Any, Any]
MAX_PAGE_SIZE = 500
# Roles that see an action's payload (masked), its times and its story.
PEOPLE = frozenset({"operator", "observer"})


def _context_fields(ctx: pb.RunContext, tool: str, scope: str) -> list[tuple[str, str]]:
    return [
        ("context.run_id", ctx.run_id),
        ("context.step_id", ctx.step_id),
        ("context.parent_run_id", ctx.parent_run_id),
        ("context.agent", ctx.agent),
        ("tool", tool),
        ("scope", scope),
    ]


class EffectGatewayService:
    """effectgate.v1.EffectGateway (registered by its generated `add_..._to_server`, which needs
    every method; not a subclass of the generated servicer because Execute answers bytes)."""

    # Methods whose handler answers the serialised response: rpc/admission.py registers them with
    # no response serializer, so grpc sends the bytes as they are.
    ANSWERS_SERIALISED: ClassVar[frozenset[str]] = frozenset({"Execute"})

    def __init__(
        self, protocol: EffectProtocol, limits: Limits, clock: Callable[[], float], desk: LimitsDesk | None = None
    ) -> None:
        self.protocol = protocol
        self.limits = limits
        self.desk = desk  # GetLimits (None: a gateway that serves no limits view)
        self.clock = clock  # the protocol's: deadlines are compared with its time
        protocol.answer_replays_with(replay_answer)

    async def Execute(self, request: pb.ExecuteRequest, context: Context) -> bytes:
        """Always the serialised `ExecuteResponse`. Why bytes and not a message: a replay's answer
        is made once and kept with the settled record by the protocol's replay cache, so a replay
        costs one lookup and no serialisation; a new action's response is serialised here instead
        of by grpc, at the same cost. One return type, and no check of it per call."""
        principal = current_principal()
        if not request.HasField("context"):
            raise InvalidRequest([("context", "the run context is required (run_id, step_id)")])
        if not request.HasField("payload"):
            raise InvalidRequest([("payload", "the tool's typed payload is required")])
        self.limits.check_ids(
            [*_context_fields(request.context, request.tool, request.scope), ("tool_call_id", request.tool_call_id)]
        )
        validate_context(request.context.run_id, request.context.step_id, request.tool)
        Authenticator.check_tool(principal, request.tool)
        result = await self.protocol.execute(
            ExecuteCommand(
                identity=ActionIdentity(
                    tenant=principal.tenant,
                    run_id=request.context.run_id,
                    step_id=request.context.step_id,
                    tool=request.tool,
                    scope=request.scope,
                    parent_run_id=request.context.parent_run_id,
                    agent=request.context.agent,
                    tool_call_id=request.tool_call_id,
                ),
                payload_type_url=request.payload.type_url,
                payload=request.payload.value,
                bypass=request.bypass,
            ),
            deadline=deadline_of(context, self.protocol.tool_deadline(request.tool), self.clock),
        )
        if result.answer is not None:
            return result.answer
        return execute_answer(result.record, result.replayed)

    async def Verify(self, request: pb.VerifyRequest, context: Context) -> pb.VerifyResponse:
        principal = current_principal()
        target = request.WhichOneof("target")
        if target == "action_id":
            action_id = request.action_id
            self.limits.check_ids([("action_id", action_id)])
        elif target == "ref":
            ref = request.ref
            self.limits.check_ids(_context_fields(ref.context, ref.tool, ref.scope))
            validate_context(ref.context.run_id, ref.context.step_id, ref.tool)
            ident = ActionIdentity(principal.tenant, ref.context.run_id, ref.context.step_id, ref.tool, ref.scope)
            action_id = ident.action_id
        else:
            raise InvalidRequest([("target", "give an action_id or a ref")])
        record, observation = await self.protocol.verify(principal.tenant, action_id)
        audit_log.operator_act("verify", principal.name, "", record)
        return pb.VerifyResponse(action=action_pb(record), observation=observation_pb(observation))

    async def GetAction(self, request: pb.GetActionRequest, context: Context) -> pb.Action:
        self._check_action_id(request.action_id)
        principal = current_principal()
        record = await self.protocol.get(principal.tenant, request.action_id)
        if not principal.roles & PEOPLE:  # agents keep the record only
            return action_pb(record)
        required = self.protocol.tool_config(record.tool).approvals if _configured(self.protocol, record.tool) else 0
        settled_at = await self.protocol.settled_at(record)
        return detailed_action_pb(record, masked_payload(self.protocol, record), required, settled_at)

    async def GetActionHistory(
        self, request: pb.GetActionHistoryRequest, context: Context
    ) -> pb.GetActionHistoryResponse:
        self._check_action_id(request.action_id)
        events = await self.protocol.history(current_principal().tenant, request.action_id)
        return pb.GetActionHistoryResponse(events=[event_pb(e) for e in events])

    async def WatchActions(
        self, request: pb.WatchActionsRequest, context: Context
    ) -> AsyncIterator[pb.WatchActionsResponse]:
        if request.state and request.state not in PB_TO_STATE:
            raise InvalidRequest([("state", f"unknown state {request.state}")])
        self.limits.check_ids([("run_id", request.run_id), ("tool", request.tool)])
        self.limits.check_page_token(request.cursor)
        query = ListQuery(
            tenant=current_principal().tenant,
            state=PB_TO_STATE.get(request.state),
            run_id=request.run_id,
            tool=request.tool,
        )
        watch = Watch(self.protocol, query, request.cursor)
        yield pb.WatchActionsResponse(cursor=watch.start())
        async for change in watch.changes():
            yield pb.WatchActionsResponse(action=action_pb(change.record), cursor=change.cursor)

    async def GetLimits(self, request: pb.GetLimitsRequest, context: Context) -> pb.GetLimitsResponse:
        self.limits.check_ids([("tool", request.tool), ("run_id", request.run_id)])
        if self.desk is None:
            raise InvalidRequest([("tool", "this gateway serves no limits view")])
        found = await self.desk.usage(current_principal().tenant, request.tool, request.run_id)
        return pb.GetLimitsResponse(tools=[tool_limits_pb(u) for u in found])

    def _check_action_id(self, action_id: str) -> None:
        if not action_id:
            raise InvalidRequest([("action_id", "must not be empty")])
        self.limits.check_ids([("action_id", action_id)])

    async def ListActions(self, request: pb.ListActionsRequest, context: Context) -> pb.ListActionsResponse:
        if request.page_size < 0:
            raise InvalidRequest([("page_size", "must not be negative")])
        if request.state and request.state not in PB_TO_STATE:
            raise InvalidRequest([("state", f"unknown state {request.state}")])
        self.limits.check_ids([("run_id", request.run_id), ("tool", request.tool)])
        self.limits.check_page_token(request.page_token)
        query = ListQuery(
            tenant=current_principal().tenant,
            state=PB_TO_STATE.get(request.state),
            run_id=request.run_id,
            tool=request.tool,
            page_size=min(request.page_size or 50, MAX_PAGE_SIZE),
            after=request.page_token,
        )
        page = await self.protocol.list(query)
        actions = [action_pb(r) for r in page.records]
        fits = fit_page(actions, self.limits.max_page_bytes)
        if fits == len(actions):
            return pb.ListActionsResponse(actions=actions, next_page_token=page.next_token)
        # Too many bytes: answer the first `fits` and a token that continues right after them.
        shorter = await self.protocol.list(replace(query, page_size=fits))
        return pb.ListActionsResponse(
            actions=[action_pb(r) for r in shorter.records], next_page_token=shorter.next_token
        )


def _configured(protocol: EffectProtocol, tool: str) -> bool:
    try:
        protocol.tool_config(tool)
    except InvalidRequest:  # a tool since removed from the config
        return False
    return True
