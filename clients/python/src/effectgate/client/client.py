"""The asyncio client. The channel is created lazily inside the running event loop (and again
if the client is used from another loop), so a client made at module level works inside
`asyncio.run`. Errors arrive as the typed exceptions of `effectgate.client.errors`. What the
calls send, how they retry and how errors map is shared with the blocking client (core.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, Unpack, cast

import grpc

from effectgate.client import calls
from effectgate.client.calls import Call, Listing
from effectgate.client.core import ClientCore, Options, signed_as
from effectgate.client.tracing import aio_interceptors
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc

P = ParamSpec("P")
T = TypeVar("T")


def _unary(build: Callable[P, Call[T]]) -> Callable[Concatenate[EffectGateClient, P], Coroutine[Any, Any, T]]:
    async def method(self: EffectGateClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._send(build(*args, **kwargs))

    return signed_as(method, build)


def _pages(
    build: Callable[P, Listing],
) -> Callable[Concatenate[EffectGateClient, P], AsyncIterator[pb.ListActionsResponse]]:
    async def method(
        self: EffectGateClient, /, *args: P.args, **kwargs: P.kwargs
    ) -> AsyncIterator[pb.ListActionsResponse]:
        async for page in self._walk(build(*args, **kwargs)):
            yield page

    return signed_as(method, build)


def _actions(build: Callable[P, Listing]) -> Callable[Concatenate[EffectGateClient, P], AsyncIterator[pb.Action]]:
    async def method(self: EffectGateClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[pb.Action]:
        async for page in self._walk(build(*args, **kwargs)):
            for action in page.actions:
                yield action

    return signed_as(method, build, "list")


class EffectGateClient(ClientCore["gateway_pb2_grpc.EffectGatewayAsyncStub", "gateway_pb2_grpc.OperatorAsyncStub"]):
    """`target`, `token` and TLS default to EFFECTGATE_TARGET, EFFECTGATE_TOKEN and
    EFFECTGATE_TLS_CA / _CERT / _KEY. Pass an existing `grpc.aio.Channel` as `target` to use it
    as it is (`close()` closes it). `retry=True` (or a RetryPolicy) retries the safe cases."""

    def __init__(self, target: str | grpc.aio.Channel | None = None, **options: Unpack[Options]) -> None:
        super().__init__(target if isinstance(target, str) else None, **options)
        given = target if isinstance(target, grpc.aio.Channel) else None
        self._given = given
        self._channel: grpc.aio.Channel | None = given
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def connect(cls, target: str | None = None, **options: Unpack[Options]) -> EffectGateClient:
        return cls(target, **options)

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
            interceptors = aio_interceptors(self.tracing)
            extra = {"interceptors": interceptors} if interceptors else {}
            self._channel = self._dial(grpc.aio.secure_channel, grpc.aio.insecure_channel, **extra)
            self._loop, self._stubs = loop, None
        if self._stubs is None:
            assert self._channel is not None
            self._stubs = self._on(self._channel)
        return self._stubs

    async def _send(self, call: Call[T]) -> T:
        attempts = self._attempts(call, asyncio.get_running_loop().time)
        while True:
            try:
                return cast(T, await self._start(call))
            except grpc.aio.AioRpcError as raw:
                wait = attempts.failed(raw)
            await asyncio.sleep(wait)

    async def _walk(self, listing: Listing) -> AsyncIterator[pb.ListActionsResponse]:
        call: Call[pb.ListActionsResponse] | None = listing.page()
        while call is not None:
            page = await self._send(call)
            yield page
            call = listing.after(page)

    async def watch(
        self, *, state: int = 0, tool: str = "", run_id: str = "", cursor: str = ""
    ) -> AsyncGenerator[pb.WatchActionsResponse, None]:
        """The tenant's actions as they change (roles: operator, observer). The first message
        carries only the cursor the watch starts at; pass a message's cursor to resume after it
        (the actions changed in the 5 s before it may come again: drop a message whose action and
        `updated_at` you already have)."""
        stub, _ = self._ensure()
        request = calls.watch_request(state=state, tool=tool, run_id=run_id, cursor=cursor)
        async for message in stub.WatchActions(request, metadata=self.metadata):
            yield message

    # -- the calls (calls.py); operator calls are never retried automatically -------------------

    execute = _unary(calls.execute)
    verify = _unary(calls.verify)
    get = _unary(calls.get)
    pages = _pages(calls.pages)
    list = _actions(calls.actions)
    history = _unary(calls.history)
    events = _unary(calls.events)
    limits = _unary(calls.limits)
    wait = _unary(calls.wait)
    approve = _unary(calls.approve)
    deny = _unary(calls.deny)
    reconcile = _unary(calls.reconcile)
    grant_bypass = _unary(calls.grant_bypass)
    grant_limit = _unary(calls.grant_limit)
