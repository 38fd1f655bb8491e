"""The process: the server that composes the wings, the worker pool, the command line."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

# gRPC's C core reads its log verbosity once, when grpc is first imported (before any `main`
# runs): at INFO it writes a text line for every failed TLS handshake. Errors only, unless the
# environment asks for more; what it still writes is made JSON under `--log-format json`.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

if TYPE_CHECKING:
    from effectgate.gateway.runtime.observing import GatewayObserver
    from effectgate.gateway.runtime.server import Gateway

__all__ = ["Gateway", "GatewayObserver"]


def __getattr__(name: str) -> object:
    # Loaded on first use, so that `python -m effectgate.gateway.runtime.healthcheck` (the
    # container's health probe) does not load the whole server.
    if name == "Gateway":
        from effectgate.gateway.runtime.server import Gateway

        return Gateway
    if name == "GatewayObserver":
        from effectgate.gateway.runtime.observing import GatewayObserver

        return GatewayObserver
    raise AttributeError(name)
