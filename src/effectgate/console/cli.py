"""`effectgate console`: the operator console, served by uvicorn on loopback by default.

    effectgate console --target 127.0.0.1:50051                    # http://127.0.0.1:8780
    effectgate console --cert-file console.crt --key-file console.key --listen 0.0.0.0 --port 8443

Prints `console listening on URL` once the socket is bound (port 0: any free port)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tomllib
from dataclasses import replace

import uvicorn

from effectgate.console.app import build_app
from effectgate.console.door.csrf import origin_of
from effectgate.console.settings import ConsoleSettings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="effectgate console", description="the operator console in the browser")
    p.add_argument(
        "--target",
        default=os.environ.get("EFFECTGATE_TARGET", "127.0.0.1:50051"),
        help="gateway host:port or unix:PATH",
    )
    p.add_argument("--tls-ca", default=None, help="PEM roots of the gateway's certificate (else EFFECTGATE_TLS_CA)")
    p.add_argument("--tls-cert", default=None, help="mTLS: the console's client certificate (else EFFECTGATE_TLS_CERT)")
    p.add_argument("--tls-key", default=None, help="mTLS: its key (else EFFECTGATE_TLS_KEY)")
    p.add_argument("--listen", default="127.0.0.1", help="address to serve on (default: loopback only)")
    p.add_argument("--port", type=int, default=8780, help="port (0: any free port)")
    p.add_argument("--cert-file", default="", help="serve HTTPS with this certificate (cookies become Secure)")
    p.add_argument("--key-file", default="", help="the certificate's key")
    p.add_argument("--public-url", default="", help="the console's URL as people open it (behind a proxy)")
    p.add_argument("--trusted-proxy", action="store_true", help="read the browser's address from X-Forwarded-For")
    p.add_argument("--secret-env", default="", help="variable holding the cookie-signing secret (several consoles)")
    p.add_argument("--session-idle", type=float, default=1800, help="seconds a session lives unused")
    p.add_argument("--trace-url", default="", help="trace link template, e.g. a search for {action_id}")
    p.add_argument("--provider-url", default="", help="provider link template, e.g. .../payments/{external_id}")
    p.add_argument("--proxy-header", default="", help="trusted reverse proxy: the header naming the principal")
    p.add_argument("--proxy-principals", default="", help='TOML: principal = "VARIABLE holding its token"')
    p.add_argument("--audit-scan", type=int, default=500, help="the audit page reads the newest N actions")
    p.add_argument("--log-level", default="warning")
    return p


def proxy_tokens(path: str) -> dict[str, str]:
    if not path:
        return {}
    with open(path, "rb") as f:
        names = tomllib.load(f)
    missing = [v for v in names.values() if not os.environ.get(str(v))]
    if missing:
        raise ValueError(f"unset token variables: {', '.join(sorted(map(str, missing)))}")
    return {str(k): os.environ[str(v)] for k, v in names.items()}


def settings_from(args: argparse.Namespace) -> ConsoleSettings:
    if bool(args.cert_file) != bool(args.key_file):
        raise ValueError("--cert-file and --key-file go together")
    if args.public_url and not origin_of(args.public_url):
        raise ValueError(f"--public-url {args.public_url!r} is not a URL (scheme://host[:port])")
    if bool(args.proxy_header) != bool(args.proxy_principals):
        raise ValueError("--proxy-header needs --proxy-principals (and the other way round)")
    settings = ConsoleSettings(
        target=args.target,
        ca_file=args.tls_ca,
        cert_file=args.tls_cert,
        key_file=args.tls_key,
        https=bool(args.cert_file),
        public_url=args.public_url,
        trusted_proxy=args.trusted_proxy,
        session_idle=args.session_idle,
        proxy_header=args.proxy_header,
        proxy_tokens=proxy_tokens(args.proxy_principals),
        trace_url=args.trace_url,
        provider_url=args.provider_url,
        audit_scan=args.audit_scan,
    )
    return replace(settings, secret=os.environ[args.secret_env]) if args.secret_env else settings


def main(argv: list[str] | None = None) -> int:
    """the operator console: actions, approvals and reconciliation in a browser, on loopback"""
    args = parser().parse_args(argv)
    try:
        settings = settings_from(args)
    except (ValueError, KeyError, OSError, tomllib.TOMLDecodeError) as error:
        print(f"effectgate console: configuration error: {error}", file=sys.stderr)
        return 2
    family = socket.AF_INET6 if ":" in args.listen else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.listen, args.port))
    sock.listen(2048)  # connections made from the ready line on wait in the backlog until uvicorn serves
    config = uvicorn.Config(
        build_app(settings),
        log_level=args.log_level.lower(),
        ssl_certfile=args.cert_file or None,
        ssl_keyfile=args.key_file or None,
        proxy_headers=False,  # the client address is the socket's, whatever a header says
    )
    scheme, port = ("https" if args.cert_file else "http"), sock.getsockname()[1]
    host = f"[{args.listen}]" if family == socket.AF_INET6 else args.listen
    print(f"console listening on {scheme}://{host}:{port}", flush=True)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        return 130
    return 0
