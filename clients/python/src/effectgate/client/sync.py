"""The blocking client, with the same surface as EffectGateClient, for code without an event
loop (scripts, threads, sync agent frameworks). Thread-safe: one channel shared by all calls.
What the calls send, how they retry and how errors map is shared with the asyncio client
(core.py); this module only blocks where that one awaits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Concatenate, ParamSpec, TypeVar, Unpack, cast

import grpc

from effectgate.client import calls
from effectgate.client.calls import Call, Listing
from effectgate.client.core import ClientCore, Options, signed_as
from effectgate.client.tracing import intercept
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc

P = ParamSpec("P")
T = TypeVar("T")


def _unary(build: Callable[P, Call[T]]) -> Callable[Concatenate[SyncEffectGateClient, P], T]:
    def method(self: SyncEffectGateClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._send(build(*args, **kwargs))

    return signed_as(method, build)


def _pages(
    build: Callable[P, Listing],
) -> Callable[Concatenate[SyncEffectGateClient, P], Iterator[pb.ListActionsResponse]]:
    def method(self: SyncEffectGateClient, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[pb.ListActionsResponse]:
        yield from self._walk(build(*args, **kwargs))

    return signed_as(method, build)


def _actions(build: Callable[P, Listing]) -> Callable[Concatenate[SyncEffectGateClient, P], Iterator[pb.Action]]:
    def method(self: SyncEffectGateClient, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[pb.Action]:
        for page in self._walk(build(*args, **kwargs)):
            yield from page.actions

    return signed_as(method, build, "list")


class SyncEffectGateClient(ClientCore[gateway_pb2_grpc.EffectGatewayStub, gateway_pb2_grpc.OperatorStub]):
    """See EffectGateClient: same arguments (but no channel as `target`), same environment
    variables, same errors."""

    def __init__(self, target: str | None = None, **options: Unpack[Options]) -> None:
        super().__init__(target, **options)
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None

    def __enter__(self) -> SyncEffectGateClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            channel, self._channel, self._stubs = self._channel, None, None
        if channel is not None:
            channel.close()

    def _ensure(self) -> tuple[gateway_pb2_grpc.EffectGatewayStub, gateway_pb2_grpc.OperatorStub]:
        with self._lock:
            if self._stubs is None:
                self._channel = intercept(self._dial(grpc.secure_channel, grpc.insecure_channel), self.tracing)
                self._stubs = self._on(self._channel)
            return self._stubs

    def _send(self, call: Call[T]) -> T:
        attempts = self._attempts(call, time.monotonic)
        while True:
            try:
                return cast(T, self._start(call))
            except grpc.RpcError as raw:
                wait = attempts.failed(raw)
            time.sleep(wait)

    def _walk(self, listing: Listing) -> Iterator[pb.ListActionsResponse]:
        call: Call[pb.ListActionsResponse] | None = listing.page()
        while call is not None:
            page = self._send(call)
            yield page
            call = listing.after(page)

    def watch(
        self, *, state: int = 0, tool: str = "", run_id: str = "", cursor: str = ""
    ) -> Iterator[pb.WatchActionsResponse]:
        """The tenant's actions as they change (roles: operator, observer). The first message
        carries only the cursor the watch starts at; pass a message's cursor to resume after it
        (the actions changed in the 5 s before it may come again: drop a message whose action and
        `updated_at` you already have)."""
        stub, _ = self._ensure()
        request = calls.watch_request(state=state, tool=tool, run_id=run_id, cursor=cursor)
        yield from stub.WatchActions(request, metadata=self.metadata)

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
