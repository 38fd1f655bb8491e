"""The asyncio client. The channel is created lazily inside the running event loop (and again
if the client is used from another loop), so a client made at module level works inside
`asyncio.run`. Errors arrive as the typed exceptions of `effectgate.client.errors`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from effectgate.client import requests
from effectgate.client.context import RunContext
from effectgate.client.errors import from_rpc_error
from effectgate.client.retry import RetryPolicy, as_policy
from effectgate.client.settings import CHANNEL_OPTIONS, Settings
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc

T = TypeVar("T")
log = logging.getLogger("effectgate.client")


class EffectGateClient:
    """`target`, `token` and TLS default to EFFECTGATE_TARGET, EFFECTGATE_TOKEN and
    EFFECTGATE_TLS_CA / _CERT / _KEY. Pass an existing `grpc.aio.Channel` as `target` to use it
    as it is (`close()` closes it). `retry=True` (or a RetryPolicy) retries the safe cases."""

    def __init__(
        self,
        target: str | grpc.aio.Channel | None = None,
        *,
        token: str | None = None,
        tls: bool | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        retry: RetryPolicy | bool | None = None,
        timeout: float | None = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        given = target if isinstance(target, grpc.aio.Channel) else None
        self.settings = Settings.resolve(
            target if isinstance(target, str) else None,
            token=token,
            tls=tls,
            ca_file=ca_file,
            cert_file=cert_file,
            key_file=key_file,
        )
        self.retry = as_policy(retry)
        self.timeout = timeout
        # Extra call metadata sent with every call (e.g. a W3C traceparent from a front door).
        self._headers = tuple((headers or {}).items())
        self._given = given
        self._channel: grpc.aio.Channel | None = given
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stubs: tuple[gateway_pb2_grpc.EffectGatewayAsyncStub, gateway_pb2_grpc.OperatorAsyncStub] | None = None

    @classmethod
    def connect(cls, target: str | None = None, **options: object) -> EffectGateClient:
        return cls(target, **options)  # type: ignore[arg-type]

    async def __aenter__(self) -> EffectGateClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        channel, self._channel, self._stubs = self._channel, self._given, None
        if channel is not None and (self._given is not None or self._loop is asyncio.get_running_loop()):
            await channel.close(grace=None)

    # -- the channel and the raw stubs --------------------------------------------------------

    def _ensure(self) -> tuple[gateway_pb2_grpc.EffectGatewayAsyncStub, gateway_pb2_grpc.OperatorAsyncStub]:
        loop = asyncio.get_running_loop()
        if self._given is None and (self._channel is None or self._loop is not loop):
            # A channel belongs to the loop it was made in; one from a finished loop is dropped.
            credentials = self.settings.credentials()
            target = self.settings.target
            self._channel = (
                grpc.aio.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
                if credentials is not None
                else grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
            )
            self._loop, self._stubs = loop, None
        if self._stubs is None:
            assert self._channel is not None
            self._stubs = (
                gateway_pb2_grpc.EffectGatewayStub(self._channel),
                gateway_pb2_grpc.OperatorStub(self._channel),
            )
        return self._stubs

    @property
    def stub(self) -> gateway_pb2_grpc.EffectGatewayAsyncStub:
        """The generated stub (raw gRPC errors); pass `metadata=client.metadata`."""
        return self._ensure()[0]

    @property
    def operator(self) -> gateway_pb2_grpc.OperatorAsyncStub:
        return self._ensure()[1]

    @property
    def metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return (*self.settings.call_metadata, *self._headers)

    async def _call(self, send: Callable[[float | None], Awaitable[T]], timeout: float | None, retry: bool) -> T:
        policy = self.retry if retry else None
        loop = asyncio.get_running_loop()
        started, attempt = loop.time(), 0
        while True:
            attempt += 1
            try:
                return await send(timeout if timeout is not None else self.timeout)
            except grpc.aio.AioRpcError as raw:
                error = from_rpc_error(raw)
                wait = policy.delay(error, attempt, loop.time() - started) if policy else None
                if wait is None:
                    raise error from None
                log.info("retrying in %.2fs (attempt %d): %s", wait, attempt + 1, error)
            await asyncio.sleep(wait)

    # -- agent calls ----------------------------------------------------------------------------

    async def execute(
        self,
        tool: str,
        payload: Message,
        *,
        scope: str,
        tool_call_id: str = "",
        context: RunContext | None = None,
        timeout: float | None = None,
        bypass: bool = False,
    ) -> pb.ExecuteResponse:
        """Performs `tool` once for the current (run, step, scope). Safe to call again with the
        same context after any error or timeout: the answer is the same action."""
        request = requests.execute(tool, payload, scope, tool_call_id, context, bypass)
        return await self._call(
            lambda t: self.stub.Execute(request, timeout=t, metadata=self.metadata), timeout, retry=True
        )

    async def verify(
        self,
        action_id: str | None = None,
        *,
        tool: str = "",
        scope: str = "",
        context: RunContext | None = None,
        timeout: float | None = None,
    ) -> pb.VerifyResponse:
        """Reads the provider's state back now: by action id, or by (run context, tool, scope)."""
        request = requests.verify(action_id, tool, scope, context)
        return await self._call(
            lambda t: self.stub.Verify(request, timeout=t, metadata=self.metadata), timeout, retry=True
        )

    async def get(self, action_id: str, *, timeout: float | None = None) -> pb.Action:
        request = pb.GetActionRequest(action_id=action_id)
        return await self._call(
            lambda t: self.stub.GetAction(request, timeout=t, metadata=self.metadata), timeout, retry=True
        )

    async def pages(
        self, *, state: int = 0, run_id: str = "", tool: str = "", page_size: int = 100
    ) -> AsyncIterator[pb.ListActionsResponse]:
        """ListActions page by page (oldest first) until the gateway gives no page token."""
        token = ""
        while True:
            request = requests.list_actions(state, run_id, tool, page_size, token)
            page = await self._call(self._lister(request), None, retry=True)
            yield page
            token = page.next_page_token
            if not token:
                return

    def _lister(self, request: pb.ListActionsRequest) -> Callable[[float | None], Awaitable[pb.ListActionsResponse]]:
        return lambda t: self.stub.ListActions(request, timeout=t, metadata=self.metadata)

    async def list(
        self, *, state: int = 0, run_id: str = "", tool: str = "", page_size: int = 100
    ) -> AsyncIterator[pb.Action]:
        """Every matching action, fetched a page at a time: `async for a in client.list(...)`."""
        async for page in self.pages(state=state, run_id=run_id, tool=tool, page_size=page_size):
            for action in page.actions:
                yield action

    # -- operator calls (role: operator); never retried automatically ---------------------------

    async def approve(self, action_id: str, *, note: str, timeout: float | None = None) -> pb.Action:
        request = pb.ApproveRequest(action_id=action_id, note=note)
        return await self._call(
            lambda t: self.operator.Approve(request, timeout=t, metadata=self.metadata), timeout, retry=False
        )

    async def reconcile(
        self, action_id: str, *, resolution: int | str, note: str, external_id: str = "", timeout: float | None = None
    ) -> pb.Action:
        """Settles an UNKNOWN action: resolution CONFIRMED, REJECTED or NOT_FOUND (a State or name)."""
        request = requests.reconcile(action_id, resolution, note, external_id)
        return await self._call(
            lambda t: self.operator.Reconcile(request, timeout=t, metadata=self.metadata), timeout, retry=False
        )

    async def grant_bypass(self, action_id: str, *, note: str, timeout: float | None = None) -> pb.Action:
        request = pb.GrantBypassRequest(action_id=action_id, note=note)
        return await self._call(
            lambda t: self.operator.GrantBypass(request, timeout=t, metadata=self.metadata), timeout, retry=False
        )
