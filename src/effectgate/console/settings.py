"""What the console is told at start: where the gateway is, how the console itself is served,
how people sign in, and the link templates of the action page."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ConsoleSettings:
    # The gateway (TLS and mTLS as for every client: EFFECTGATE_TLS_CA / _CERT / _KEY).
    target: str = "127.0.0.1:50051"
    tls: bool | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    # The console's own TLS: cookies are then marked Secure.
    https: bool = False
    # The URL people open (behind a proxy): its origin is the only one a POST may come from.
    # Empty: the scheme and Host of each request.
    public_url: str = ""
    # A reverse proxy in front sets X-Forwarded-For: the browser's address in the console's logs
    # and sign-in limits is then its first address (else the socket's).
    trusted_proxy: bool = False
    # Signs the session cookie and keys the sign-in form's CSRF token; random per process unless given (several console
    # processes behind one load balancer share one).
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    session_idle: float = 30 * 60
    session_lifetime: float = 12 * 3600
    session_limit: int = 1000
    # Behind a trusted reverse proxy: the header naming the signed-in principal, and the
    # gateway token the console uses for each principal it may name (docs/console.md).
    proxy_header: str = ""
    proxy_tokens: Mapping[str, str] = field(default_factory=dict)
    # Links on the action page; {action_id}, {run_id}, {tool} and {external_id} are filled in, URL-quoted.
    trace_url: str = ""
    provider_url: str = ""
    # How many of the newest actions the audit page reads the stories of.
    audit_scan: int = 500
