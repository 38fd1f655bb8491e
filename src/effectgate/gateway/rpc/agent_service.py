"""effectgate.v1.EffectGateway: translates between the wire and the effect protocol.

Auth and error translation are wrapped around each handler (rpc/admission.py); here the request is checked for shape
and size, turned into a domain command, and the answer back into messages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any, ClassVar

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from effectgate.gateway.core import (
    EffectProtocol,
    ExecuteCommand,
    LimitsDesk,
    Waits,
    Watch,
    decided,
    masked_payload,
    settled,
    validate_context,
)
from effectgate.gateway.model import ActionIdentity, ActionRecord, EventQuery, InvalidRequest, ListQuery
from effectgate.gateway.observability import audit_log
from effectgate.gateway.rpc.admission import Authenticator, current_principal
from effectgate.gateway.rpc.wire import (
    PB_TO_STATE,
    Limits,
    action_pb,
    detailed_action_pb,
    event_pb,
    execute_answer,
    execute_answers,
    fit_page,
    observation_pb,
    person_action_pb,
    replay_answer,
    tool_limits_pb,
    trail_event_pb,
)
from effectgate.v1 import gateway_pb2 as pb

Context = grpc.aio.ServicerContext[Any, Any]
MAX_PAGE_SIZE = 500
MAX_EVENTS_PAGE = 1000
# WaitAction: the wait when none is asked, the longest one, and how long before the caller's
# deadline the answer leaves (so that it arrives as an answer, not as DEADLINE_EXCEEDED).
WAIT_DEFAULT, WAIT_MAX, WAIT_MARGIN = 30.0, 300.0, 0.25
UNTIL = {pb.WAIT_UNTIL_UNSPECIFIED: decided, pb.WAIT_UNTIL_DECIDED: decided, pb.WAIT_UNTIL_SETTLED: settled}
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
        self,
        protocol: EffectProtocol,
        limits: Limits,
        clock: Callable[[], float],
        desk: LimitsDesk | None = None,
        waits: Waits | None = None,
    ) -> None:
        self.protocol = protocol
        self.waits = waits or Waits(protocol)
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
        ctx, tool, scope, tool_call_id = request.context, request.tool, request.scope, request.tool_call_id
        run_id, step_id, parent_run_id, agent = ctx.run_id, ctx.step_id, ctx.parent_run_id, ctx.agent
        # A text of n characters is at most 4n bytes: the ids are measured only when they may be
        # too long (every call pays the lengths, not the encoding).
        longest = max(
            len(run_id), len(step_id), len(parent_run_id), len(agent), len(tool), len(scope), len(tool_call_id)
        )
        if longest * 4 > self.limits.max_id_bytes:
            self.limits.check_ids([*_context_fields(ctx, tool, scope), ("tool_call_id", tool_call_id)])
        if not (run_id.strip() and step_id.strip() and tool.strip()):  # blank: each one named
            validate_context(run_id, step_id, tool)
        if principal.tools:  # a principal limited to some tools
            Authenticator.check_tool(principal, tool)
        payload = request.payload
        if not request.bypass:  # a replay the protocol's cache answers: no command, no deadline
            args = (principal.tenant, run_id, step_id, tool, scope, payload.type_url, payload.value, tool_call_id)
            answer = self.protocol.replay(*args)
            if answer is not None:
                return answer
        result = await self.protocol.execute(
            ExecuteCommand(
                identity=ActionIdentity(
                    tenant=principal.tenant,
                    run_id=run_id,
                    step_id=step_id,
                    tool=tool,
                    scope=scope,
                    parent_run_id=parent_run_id,
                    agent=agent,
                    tool_call_id=tool_call_id,
                ),
                payload_type_url=payload.type_url,
                payload=payload.value,
                bypass=request.bypass,
            ),
            deadline=deadline_of(context, self.protocol.tool_deadline(tool), self.clock),
        )
        if result.answer is not None:
            return result.answer
        record = result.record
        if result.replayed or not self.protocol.unanswered(record):
            return execute_answer(record, result.replayed)
        # An action this call settled and the cache keeps: its replays' answer is made now, from
        # the same Action, so that the first replay too answers bytes it does not serialise.
        answer, replay = execute_answers(record)
        self.protocol.keep_answer(record, replay)
        return answer

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
        required = self.protocol.approvals_required(record.tool)
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
        yield pb.WatchActionsResponse(cursor=await watch.start())
        async for change in watch.changes():
            yield pb.WatchActionsResponse(action=self._shown(change.record, True), cursor=change.cursor)

    async def WaitAction(self, request: pb.WaitActionRequest, context: Context) -> pb.WaitActionResponse:
        self._check_action_id(request.action_id)
        until = UNTIL.get(request.until)
        if until is None:
            raise InvalidRequest([("until", f"unknown value {request.until}")])
        timeout = WAIT_DEFAULT
        if request.HasField("timeout"):
            timeout = request.timeout.seconds + request.timeout.nanos / 1e9
            if timeout < 0 or request.timeout.nanos < 0:
                raise InvalidRequest([("timeout", "must not be negative")])
        timeout = min(timeout, WAIT_MAX)
        remaining = context.time_remaining()
        if remaining is not None:
            timeout = max(min(timeout, remaining - WAIT_MARGIN), 0.0)
        record, reached = await self.waits.wait(current_principal().tenant, request.action_id, until, timeout)
        return pb.WaitActionResponse(action=action_pb(record), reached=reached)

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
        people = bool(current_principal().roles & PEOPLE)
        page = await self.protocol.list(query)
        actions = [self._shown(r, people) for r in page.records]
        fits = fit_page(actions, self.limits.max_page_bytes)
        if fits == len(actions):
            return pb.ListActionsResponse(actions=actions, next_page_token=page.next_token)
        # Too many bytes: answer the first `fits` and a token that continues right after them.
        shorter = await self.protocol.list(replace(query, page_size=fits))
        return pb.ListActionsResponse(
            actions=[self._shown(r, people) for r in shorter.records], next_page_token=shorter.next_token
        )

    async def ListEvents(self, request: pb.ListEventsRequest, context: Context) -> pb.ListEventsResponse:
        if request.page_size < 0:
            raise InvalidRequest([("page_size", "must not be negative")])
        self.limits.check_ids([("principal", request.principal), ("kind", request.kind), ("tool", request.tool)])
        self.limits.check_page_token(request.page_token)
        since = _seconds(request.since) if request.HasField("since") else 0.0
        until = _seconds(request.until) if request.HasField("until") else 0.0
        if since and until and until <= since:
            raise InvalidRequest([("until", "must be after since")])
        query = EventQuery(
            tenant=current_principal().tenant,
            since=since,
            until=until,
            principal=request.principal,
            kind=request.kind,
            tool=request.tool,
            page_size=min(request.page_size or 100, MAX_EVENTS_PAGE),
            after=request.page_token,
        )
        page = await self.protocol.events(query)
        events = [trail_event_pb(e) for e in page.events]
        fits = fit_page(events, self.limits.max_page_bytes)
        if fits < len(events):  # too many bytes: the first `fits`, and a token right after them
            page = await self.protocol.events(replace(query, page_size=fits))
            events = [trail_event_pb(e) for e in page.events]
        return pb.ListEventsResponse(events=events, next_page_token=page.next_token)

    def _shown(self, record: ActionRecord, people: bool) -> pb.Action:
        """An action in a list or a watch: with its approvals for people, the record for agents."""
        return person_action_pb(record, self.protocol.approvals_required(record.tool)) if people else action_pb(record)


def _seconds(ts: Timestamp) -> float:
    """A Timestamp as Unix seconds."""
    return ts.seconds + ts.nanos / 1e9


def deadline_of(context: grpc.aio.ServicerContext[Any, Any], default: float, clock: Callable[[], float]) -> float:
    """Absolute deadline on `clock` (the protocol's): the caller's, capped by the tool's own budget."""
    remaining = context.time_remaining()
    budget = default if remaining is None else min(remaining, default)
    return clock() + max(budget, 0.0)
