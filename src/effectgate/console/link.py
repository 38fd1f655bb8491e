"""The console's one gRPC channel to the gateway, shared by every signed-in person: each request
uses a client on that channel with the person's own token, so the gateway checks every call
against the person's principal (the console holds no rights of its own).

An outage is an outage: a gateway that cannot be reached (UNAVAILABLE, or no answer in time) is
`GatewayDown`, never a refusal, and is logged once when it starts and once when it ends, not
once per request or stream."""

from __future__ import annotations

import logging
import time

import grpc

from effectgate.client import EffectGateClient, PermissionDenied, Unauthenticated
from effectgate.client.settings import CHANNEL_OPTIONS, Settings
from effectgate.console.settings import ConsoleSettings

log = logging.getLogger("effectgate.console")
# What an outage looks like from here: no connection, or no answer before the deadline.
DOWN = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# A gateway back after an outage is seen within seconds (grpc's default backoff grows to 120 s).
RECONNECT = (("grpc.initial_reconnect_backoff_ms", 250), ("grpc.max_reconnect_backoff_ms", 2000))


class SignInRefused(Exception):
    """The token is unknown to the gateway, or its principal is neither operator nor observer."""


class GatewayDown(Exception):
    """The gateway cannot be reached now (or cannot serve: `reason`, e.g. STORE_UNAVAILABLE)."""

    def __init__(self, target: str, reason: str = "") -> None:
        if reason:
            super().__init__(f"the gateway at {target} is unavailable ({reason})")
        else:
            super().__init__(f"cannot reach the gateway at {target}")
        self.target, self.reason = target, reason

    def sentence(self) -> str:
        said = str(self)
        return f"{said[0].upper()}{said[1:]}."


def is_down(error: grpc.aio.AioRpcError) -> bool:
    return error.code() in DOWN


class GatewayLink:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = Settings.resolve(
            settings.target,
            token="",
            tls=settings.tls,
            ca_file=settings.ca_file,
            cert_file=settings.cert_file,
            key_file=settings.key_file,
        )
        self._channel: grpc.aio.Channel | None = None
        self.down_since: float | None = None  # monotonic; None while the gateway answers

    def outage(self, error: grpc.aio.AioRpcError) -> GatewayDown:
        """The error to raise for an unreachable gateway; the first of an outage is logged."""
        reason = str(getattr(error, "reason", "") or "")
        if self.down_since is None:
            self.down_since = time.monotonic()
            why = f"{error.code().name}{f' {reason}' if reason else ''}: {error.details() or ''}"
            log.warning("cannot reach the gateway at %s (%s); pages answer 503 until it is back", self.target, why)
        return GatewayDown(self.target, reason)

    def reachable(self) -> None:
        """The gateway answered: the end of an outage, if there was one, is logged."""
        if self.down_since is not None:
            lasted = time.monotonic() - self.down_since
            self.down_since = None
            log.warning("the gateway at %s answers again (down for %.1fs)", self.target, lasted)

    @property
    def target(self) -> str:
        return str(self.settings.target)

    def open(self) -> None:
        """In the server's event loop (the channel belongs to it)."""
        credentials = self.settings.credentials()
        target = self.settings.target
        options = (*CHANNEL_OPTIONS, *RECONNECT)
        if credentials is not None:
            self._channel = grpc.aio.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=options)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(grace=None)

    def client(self, token: str) -> EffectGateClient:
        """A client with this person's token on the shared channel (never closed per request)."""
        assert self._channel is not None, "GatewayLink.open() first"
        return EffectGateClient(self._channel, token=token, timeout=15.0)

    async def role_of(self, token: str) -> str:
        """ "operator" or "observer", asked of the gateway. Both may read an action's story; only an
        operator may call the Operator service. The probes name no action (action_id ""), so the
        gateway refuses them before anything is looked up: nothing is decided or recorded."""
        client = self.client(token)
        try:
            await client.history("")
        except (Unauthenticated, PermissionDenied) as error:
            raise SignInRefused(str(error.reason or error.code().name)) from None
        except grpc.aio.AioRpcError as error:
            if is_down(error):  # nothing was asked: no role, no session
                raise self.outage(error) from None
            # INVALID_ARGUMENT / NOT_FOUND: a person's role, past the role check
        try:
            await client.approve("", note="")
        except PermissionDenied:
            return self._answered("observer")
        except grpc.aio.AioRpcError as error:
            if is_down(error):
                raise self.outage(error) from None
            return self._answered("operator")
        raise SignInRefused("the gateway accepted an empty approval")  # never: action_id "" names nothing

    def _answered(self, role: str) -> str:
        self.reachable()
        return role
