"""A small asyncio client: `execute(tool, payload, scope=...)` packs the typed payload and sends
the current run context; errors arrive as `grpc.aio.AioRpcError` with google.rpc details."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message

from effectgate.client.context import RunContext, current
from effectgate.v1 import gateway_pb2, gateway_pb2_grpc


class EffectGateClient:
    def __init__(self, channel: grpc.aio.Channel, *, token: str = "") -> None:
        self.channel = channel
        self.stub = gateway_pb2_grpc.EffectGatewayStub(channel)
        self.operator = gateway_pb2_grpc.OperatorStub(channel)
        # Call metadata carrying the bearer token; pass it to direct stub calls.
        self.metadata: Sequence[tuple[str, str]] = (("authorization", f"Bearer {token}"),) if token else ()

    @classmethod
    def connect(cls, target: str, *, token: str = "") -> EffectGateClient:
        return cls(grpc.aio.insecure_channel(target), token=token)

    async def close(self) -> None:
        await self.channel.close(grace=None)

    async def execute(
        self,
        tool: str,
        payload: Message,
        *,
        scope: str,
        tool_call_id: str = "",
        context: RunContext | None = None,
        timeout: float | None = 30.0,
        bypass: bool = False,
    ) -> gateway_pb2.ExecuteResponse:
        """Performs `tool` once for the current (run, step, scope). Safe to call again with the
        same context after any error or timeout: the answer is the same action."""
        packed = any_pb2.Any()
        packed.Pack(payload)
        ctx = context or current()
        request = gateway_pb2.ExecuteRequest(
            context=ctx.to_pb(),
            tool=tool,
            scope=scope,
            payload=packed,
            tool_call_id=tool_call_id or f"call-{uuid.uuid4().hex[:12]}",
            bypass=bypass,
        )
        response: gateway_pb2.ExecuteResponse = await self.stub.Execute(
            request, timeout=timeout, metadata=self.metadata
        )
        return response

    async def verify(self, action_id: str, *, timeout: float | None = 30.0) -> gateway_pb2.VerifyResponse:
        response: gateway_pb2.VerifyResponse = await self.stub.Verify(
            gateway_pb2.VerifyRequest(action_id=action_id), timeout=timeout, metadata=self.metadata
        )
        return response

    async def get(self, action_id: str) -> gateway_pb2.Action:
        action: gateway_pb2.Action = await self.stub.GetAction(
            gateway_pb2.GetActionRequest(action_id=action_id), metadata=self.metadata
        )
        return action
