"""The front door's only use of the Python client: one channel to the gateway, and per call a
client carrying the caller's bearer token, so tenants, roles and allow-lists stay the gateway's.

Every gRPC call runs in a task of its own that the MCP request awaits through `asyncio.shield`.
Two reasons. A host cancels a call (`notifications/cancelled`, a timeout, a disconnect) by
cancelling the request's anyio cancel scope; a grpc.aio call cancelled in place swallows that
cancellation and raises a new, message-less `CancelledError`, which anyio cannot tell from a
foreign cancellation: it escaped the request and tore down the stdio server's task group (the
stdin reader then died with `BrokenResourceError`). Awaiting the call through a shield makes the
request's own await raise anyio's cancellation. And an Execute must never be cut short by its
host: it runs to completion (stored, so the host's next call replays it), and `close()` waits for
the ones still running before the process ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from effectgate.client import EffectGateClient, RunContext
from effectgate.client.settings import Settings
from effectgate.mcp.contract import CallContext
from effectgate.v1 import gateway_pb2

T = TypeVar("T")


class GatewayRefusal(Exception):
    """The gateway answered with a gRPC error instead of an action."""

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: str,
        message: str,
        metadata: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code.name} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        # ErrorInfo metadata: `action_id` (and `state`) of the action a refusal is about, or a
        # limit's figures (budget, spent, left, ...); and RetryInfo.
        self.metadata = dict(metadata or {})
        self.retry_after = retry_after


# The gateway is reached but TLS fails: a CA that does not sign its certificate, a wrong server
# name, a client certificate the gateway refuses. A configuration error, not a passing one.
TLS_FAILED = "GATEWAY_TLS_FAILED"
_TLS_SIGNS = ("handshake", "certificate", "ssl_error", "tsi_", "ssl routines")


def _refusal(exc: grpc.aio.AioRpcError, tls: bool = False) -> GatewayRefusal:
    details = exc.details() or ""
    if tls and exc.code() == grpc.StatusCode.UNAVAILABLE and any(s in details.lower() for s in _TLS_SIGNS):
        return GatewayRefusal(exc.code(), TLS_FAILED, details)
    reason = ""
    metadata: dict[str, str] = {}
    retry_after: float | None = None
    status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    for detail in status.details if status else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, metadata = info.reason, dict(info.metadata)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.ToTimedelta().total_seconds()
    return GatewayRefusal(exc.code(), reason, exc.details() or "", metadata, retry_after)


class GatewayPort:
    """`settings`: TLS and mTLS to the gateway, read like the Python client reads them
    (`Settings.resolve()`: EFFECTGATE_TLS_CA, EFFECTGATE_TLS_CERT, EFFECTGATE_TLS_KEY);
    `server_name` (EFFECTGATE_TLS_SERVER_NAME) checks the gateway's certificate against that
    name instead of the target's host. Without settings, plaintext (a gateway on loopback)."""

    def __init__(
        self, target: str, *, timeout: float = 30.0, settings: Settings | None = None, server_name: str = ""
    ) -> None:
        self.target = target
        self.timeout = timeout
        self._settings = settings if settings is not None and settings.tls else None
        self._server_name = server_name
        self._channel: grpc.aio.Channel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._finishing: set[asyncio.Task[Any]] = set()

    async def _call(self, call: Coroutine[Any, Any, T], *, finish: bool = False) -> T:
        """`call` in its own task, awaited through a shield (see the module's docstring). With
        `finish`, a cancelled caller leaves it running to completion; otherwise it is cancelled too."""
        task = asyncio.get_running_loop().create_task(call)
        if finish:
            self._finishing.add(task)
            task.add_done_callback(_settled(self._finishing))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not finish:
                task.cancel()
            raise

    def _client(self, token: str, extra: Mapping[str, str]) -> EffectGateClient:
        # A grpc.aio channel belongs to the loop it was made in: made lazily, on first use.
        loop = asyncio.get_running_loop()
        if self._channel is None or self._loop is not loop:
            if self._settings is None:
                self._channel = grpc.aio.insecure_channel(self.target)
            else:
                options = [("grpc.ssl_target_name_override", self._server_name)] if self._server_name else []
                credentials = self._settings.credentials()
                assert credentials is not None  # settings without TLS are dropped in __init__
                self._channel = grpc.aio.secure_channel(self.target, credentials, options)
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
        call = client.execute(
            tool, payload, scope=ctx.scope, tool_call_id=tool_call_id, context=context, timeout=self.timeout
        )
        try:
            return await self._call(call, finish=True)
        except grpc.aio.AioRpcError as exc:
            raise _refusal(exc, self._settings is not None) from None

    async def get(self, token: str, action_id: str) -> gateway_pb2.Action:
        try:
            return await self._call(self._client(token, {}).get(action_id))
        except grpc.aio.AioRpcError as exc:
            raise _refusal(exc, self._settings is not None) from None

    async def wait(self, token: str, action_id: str, seconds: float) -> gateway_pb2.WaitActionResponse:
        """WaitAction until the action is settled (an outcome an Execute answers) or `seconds` pass."""
        try:
            return await self._call(self._client(token, {}).wait(action_id, until="settled", timeout=seconds))
        except grpc.aio.AioRpcError as exc:
            raise _refusal(exc, self._settings is not None) from None

    async def accepts(self, token: str) -> bool:
        """Whether the gateway knows this token (a one-row list; a missing role still counts)."""
        client = self._client(token, {})
        try:
            request = gateway_pb2.ListActionsRequest(page_size=1)
            await self._call(_awaited(client.stub.ListActions(request, metadata=client.metadata, timeout=self.timeout)))
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                return False
            if exc.code() != grpc.StatusCode.PERMISSION_DENIED:
                raise _refusal(exc, self._settings is not None) from None
        return True

    async def close(self) -> None:
        """Waits (up to the call timeout) for Executes whose host went away, then closes."""
        if self._finishing:
            await asyncio.wait(set(self._finishing), timeout=self.timeout + 5.0)
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = None


async def _awaited(call: Any) -> Any:
    return await call


def _settled(running: set[asyncio.Task[Any]]) -> Any:
    def done(task: asyncio.Task[Any]) -> None:
        running.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a caller that went away leaves no "never retrieved" warning

    return done
