"""The front door's only use of the Python client: one channel to the gateway, and per call a
client carrying the caller's bearer token, so tenants, roles and allow-lists stay the gateway's."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from effectgate.client import EffectGateClient, RunContext
from effectgate.mcp.contract import CallContext
from effectgate.v1 import gateway_pb2


class GatewayRefusal(Exception):
    """The gateway answered with a gRPC error instead of an action."""

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: str,
        message: str,
        figures: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code.name} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        # ErrorInfo metadata (a limit's figures: budget, spent, left, ...) and RetryInfo.
        self.figures = dict(figures or {})
        self.retry_after = retry_after


def _refusal(exc: grpc.aio.AioRpcError) -> GatewayRefusal:
    reason = ""
    figures: dict[str, str] = {}
    retry_after: float | None = None
    status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    for detail in status.details if status else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, figures = info.reason, dict(info.metadata)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.ToTimedelta().total_seconds()
    return GatewayRefusal(exc.code(), reason, exc.details() or "", figures, retry_after)


class GatewayPort:
    def __init__(self, target: str, *, timeout: float = 30.0) -> None:
        self.target = target
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self, token: str, extra: Mapping[str, str]) -> EffectGateClient:
        # A grpc.aio channel belongs to the loop it was made in: made lazily, on first use.
        loop = asyncio.get_running_loop()
        if self._channel is None or self._loop is not loop:
            self._channel = grpc.aio.insecure_channel(self.target)
            self._loop = loop
        return EffectGateClient(self._channel, token=token, headers=extra)

    async def execute(
        self,
        token: str,
        tool: str,
        payload: Message,
        ctx: CallContext,
        *,
        tool_call_id: str,
        trace: Mapping[str, str],
    ) -> gateway_pb2.ExecuteResponse:
        client = self._client(token, trace)
        context = RunContext(ctx.run_id, ctx.step_id, ctx.parent_run_id, ctx.agent)
        try:
            return await client.execute(
                tool, payload, scope=ctx.scope, tool_call_id=tool_call_id, context=context, timeout=self.timeout
            )
        except grpc.aio.AioRpcError as exc:
            raise _refusal(exc) from None

    async def get(self, token: str, action_id: str) -> gateway_pb2.Action:
        try:
            return await self._client(token, {}).get(action_id)
        except grpc.aio.AioRpcError as exc:
            raise _refusal(exc) from None

    async def accepts(self, token: str) -> bool:
        """Whether the gateway knows this token (a one-row list; a missing role still counts)."""
        client = self._client(token, {})
        try:
            await client.stub.ListActions(
                gateway_pb2.ListActionsRequest(page_size=1), metadata=client.metadata, timeout=self.timeout
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                return False
            if exc.code() != grpc.StatusCode.PERMISSION_DENIED:
                raise
        return True

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = None
