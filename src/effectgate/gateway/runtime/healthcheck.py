"""`python -m effectgate.gateway.runtime.healthcheck [HOST:PORT]`: exit 0 when the gateway reports SERVING
through the standard gRPC health service (the Dockerfile's HEALTHCHECK).

Speaks TLS when given a CA (`--tls-ca` or $EFFECTGATE_TLS_CA) and mTLS with a client certificate
(`--tls-cert`/`--tls-key` or $EFFECTGATE_TLS_CERT/$EFFECTGATE_TLS_KEY). Checking 127.0.0.1 against a
certificate issued for a DNS name needs `--tls-server-name` ($EFFECTGATE_TLS_SERVER_NAME).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


@dataclass(frozen=True)
class Tls:
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""


def _channel(target: str, tls: Tls | None) -> grpc.Channel:
    if tls is None or not tls.ca_file:
        return grpc.insecure_channel(target)
    chain = Path(tls.cert_file).read_bytes() if tls.cert_file else None
    key = Path(tls.key_file).read_bytes() if tls.key_file else None
    credentials = grpc.ssl_channel_credentials(Path(tls.ca_file).read_bytes(), key, chain)
    options = [("grpc.ssl_target_name_override", tls.server_name)] if tls.server_name else []
    return grpc.secure_channel(target, credentials, options=options)


def check(target: str, timeout: float = 2.0, tls: Tls | None = None) -> bool:
    with _channel(target, tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError:
            return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="effectgate-healthcheck")
    parser.add_argument("target", nargs="?", default="127.0.0.1:50051")
    env = os.environ.get
    parser.add_argument("--tls-ca", default=env("EFFECTGATE_TLS_CA", ""), help="CA that signed the gateway's cert")
    parser.add_argument("--tls-cert", default=env("EFFECTGATE_TLS_CERT", ""), help="client certificate (mTLS)")
    parser.add_argument("--tls-key", default=env("EFFECTGATE_TLS_KEY", ""), help="client key (mTLS)")
    parser.add_argument("--tls-server-name", default=env("EFFECTGATE_TLS_SERVER_NAME", ""))
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    tls = Tls(args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name)
    try:
        return 0 if check(args.target, args.timeout, tls) else 1
    except OSError as exc:  # unreadable certificate files
        print(f"effectgate-healthcheck: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
