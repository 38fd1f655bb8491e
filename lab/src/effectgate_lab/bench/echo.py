"""A bare grpc.aio server whose Execute answers a canned, Execute-sized response: the floor that
any Python gRPC gateway pays (parse a request, serialise an answer, one round trip).

    python -m effectgate_lab.bench.echo --response FILE   # FILE: a serialised ExecuteResponse

It prints `echo serving on port N` once it listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path
from typing import Any

import grpc

from effectgate.v1 import gateway_pb2


def echo_handler(response: gateway_pb2.ExecuteResponse) -> grpc.GenericRpcHandler[Any, Any]:
    """Execute only, registered the way generated code registers it (parse, answer, serialise)."""

    async def execute(request: gateway_pb2.ExecuteRequest, context: grpc.aio.ServicerContext[object, object]) -> object:
        return response

    handler = grpc.unary_unary_rpc_method_handler(
        execute,
        request_deserializer=gateway_pb2.ExecuteRequest.FromString,
        response_serializer=gateway_pb2.ExecuteResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler("effectgate.v1.EffectGateway", {"Execute": handler})


async def serve(response: gateway_pb2.ExecuteResponse) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((echo_handler(response),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"echo serving on port {port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(grace=None)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m effectgate_lab.bench.echo")
    parser.add_argument("--response", type=Path, required=True)
    response_path: Path = parser.parse_args().response
    asyncio.run(serve(gateway_pb2.ExecuteResponse.FromString(response_path.read_bytes())))


if __name__ == "__main__":
    main()
