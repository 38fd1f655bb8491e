"""The blocking client, with the same surface as EffectGateClient, for code without an event
loop (scripts, threads, sync agent frameworks). Thread-safe: one channel shared by all calls."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
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


class SyncEffectGateClient:
    """See EffectGateClient: same arguments, same environment variables, same errors."""

    def __init__(
        self,
        target: str | None = None,
        *,
        token: str | None = None,
        tls: bool | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        retry: RetryPolicy | bool | None = None,
        timeout: float | None = 30.0,
    ) -> None:
        self.settings = Settings.resolve(
            target, token=token, tls=tls, ca_file=ca_file, cert_file=cert_file, key_file=key_file
        )
        self.retry = as_policy(retry)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stubs: tuple[gateway_pb2_grpc.EffectGatewayStub, gateway_pb2_grpc.OperatorStub] | None = None

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
                credentials = self.settings.credentials()
                target = self.settings.target
                self._channel = (
                    grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
                    if credentials is not None
                    else grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
                )
                self._stubs = (
                    gateway_pb2_grpc.EffectGatewayStub(self._channel),
                    gateway_pb2_grpc.OperatorStub(self._channel),
                )
            return self._stubs

    @property
    def stub(self) -> gateway_pb2_grpc.EffectGatewayStub:
        return self._ensure()[0]

    @property
    def operator(self) -> gateway_pb2_grpc.OperatorStub:
        return self._ensure()[1]

    @property
    def metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self.settings.call_metadata

    def _call(self, send: Callable[[float | None], T], timeout: float | None, retry: bool) -> T:
        policy = self.retry if retry else None
        started, attempt = time.monotonic(), 0
        while True:
            attempt += 1
            try:
                return send(timeout if timeout is not None else self.timeout)
            except grpc.RpcError as raw:
                error = from_rpc_error(raw)
                wait = policy.delay(error, attempt, time.monotonic() - started) if policy else None
                if wait is None:
                    raise error from None
                log.info("retrying in %.2fs (attempt %d): %s", wait, attempt + 1, error)
            time.sleep(wait)

    def execute(
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
        request = requests.execute(tool, payload, scope, tool_call_id, context, bypass)
        return self._call(lambda t: self.stub.Execute(request, timeout=t, metadata=self.metadata), timeout, True)

    def verify(
        self,
        action_id: str | None = None,
        *,
        tool: str = "",
        scope: str = "",
        context: RunContext | None = None,
        timeout: float | None = None,
    ) -> pb.VerifyResponse:
        request = requests.verify(action_id, tool, scope, context)
        return self._call(lambda t: self.stub.Verify(request, timeout=t, metadata=self.metadata), timeout, True)

    def get(self, action_id: str, *, timeout: float | None = None) -> pb.Action:
        request = pb.GetActionRequest(action_id=action_id)
        return self._call(lambda t: self.stub.GetAction(request, timeout=t, metadata=self.metadata), timeout, True)

    def pages(
        self, *, state: int = 0, run_id: str = "", tool: str = "", page_size: int = 100
    ) -> Iterator[pb.ListActionsResponse]:
        token = ""
        while True:
            request = requests.list_actions(state, run_id, tool, page_size, token)
            page = self._call(self._lister(request), None, True)
            yield page
            token = page.next_page_token
            if not token:
                return

    def _lister(self, request: pb.ListActionsRequest) -> Callable[[float | None], pb.ListActionsResponse]:
        return lambda t: self.stub.ListActions(request, timeout=t, metadata=self.metadata)

    def list(self, *, state: int = 0, run_id: str = "", tool: str = "", page_size: int = 100) -> Iterator[pb.Action]:
        for page in self.pages(state=state, run_id=run_id, tool=tool, page_size=page_size):
            yield from page.actions

    def approve(self, action_id: str, *, note: str, timeout: float | None = None) -> pb.Action:
        request = pb.ApproveRequest(action_id=action_id, note=note)
        return self._call(lambda t: self.operator.Approve(request, timeout=t, metadata=self.metadata), timeout, False)

    def reconcile(
        self, action_id: str, *, resolution: int | str, note: str, external_id: str = "", timeout: float | None = None
    ) -> pb.Action:
        request = requests.reconcile(action_id, resolution, note, external_id)
        return self._call(lambda t: self.operator.Reconcile(request, timeout=t, metadata=self.metadata), timeout, False)

    def grant_bypass(self, action_id: str, *, note: str, timeout: float | None = None) -> pb.Action:
        request = pb.GrantBypassRequest(action_id=action_id, note=note)
        return self._call(
            lambda t: self.operator.GrantBypass(request, timeout=t, metadata=self.metadata), timeout, False
        )
