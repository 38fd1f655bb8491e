"""The process: the server that composes the wings, the worker pool, the command line."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from effectgate.gateway.runtime.server import Gateway

__all__ = ["Gateway"]


def __getattr__(name: str) -> object:
    # Loaded on first use, so that `python -m effectgate.gateway.runtime.healthcheck` (the
    # container's health probe) does not load the whole server.
    if name == "Gateway":
        from effectgate.gateway.runtime.server import Gateway

        return Gateway
    raise AttributeError(name)
