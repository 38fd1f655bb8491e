"""A gateway's start cancelled half-way (Ctrl-C in `make demo` while its gateway starts) stops
cleanly: grpc.aio's own start, cancelled, left its serving loop to raise InvalidStateError from
`server.stop()` and a task exception logged with its traceback (pair Y2, the demo at 3.94 s)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from effectgate.gateway.runtime.server import start_grpc


async def test_a_grpc_start_cancelled_half_way_finishes_then_the_server_stops_cleanly() -> None:
    server = grpc.aio.server()
    server.add_insecure_port("127.0.0.1:0")
    starting = asyncio.ensure_future(start_grpc(server))
    await asyncio.sleep(0)  # inside grpc.aio's start, waiting for its serving loop to begin
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    await server.stop(0)  # raised InvalidStateError after a bare `await server.start()`
