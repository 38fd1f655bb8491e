"""`python -m effectgate.gateway.healthcheck HOST:PORT`: exit 0 when the gateway reports SERVING
through the standard gRPC health service (used by the Dockerfile's HEALTHCHECK)."""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(target: str, timeout: float = 2.0) -> bool:
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError:
            return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return 0 if check(args[0] if args else "127.0.0.1:50051") else 1


if __name__ == "__main__":
    sys.exit(main())
