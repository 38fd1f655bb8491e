"""The console's one gRPC channel to the gateway, shared by every signed-in person: each request
uses a client on that channel with the person's own token, so the gateway checks every call
against the person's principal (the console holds no rights of its own)."""

from __future__ import annotations

import grpc

from effectgate.client import EffectGateClient, PermissionDenied, Unauthenticated
from effectgate.client.settings import CHANNEL_OPTIONS, Settings
from effectgate.console.settings import ConsoleSettings


class SignInRefused(Exception):
    """The token is unknown to the gateway, or its principal is neither operator nor observer."""


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

    def open(self) -> None:
        """In the server's event loop (the channel belongs to it)."""
        credentials = self.settings.credentials()
        target = self.settings.target
        if credentials is not None:
            self._channel = grpc.aio.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)

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
        except grpc.aio.AioRpcError:
            pass  # INVALID_ARGUMENT / NOT_FOUND: a person's role, past the role check
        try:
            await client.approve("", note="")
        except PermissionDenied:
            return "observer"
        except grpc.aio.AioRpcError:
            return "operator"
        raise SignInRefused("the gateway accepted an empty approval")  # never: action_id "" names nothing
