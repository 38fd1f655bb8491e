"""Cross-site request forgery, answered twice on every request that can change anything (any
method but GET, HEAD and OPTIONS), before a handler runs:

1. **Same origin.** `Origin` must be the console's own origin (`--public-url`, else the scheme
   and `Host` this request came in on). A browser that sends no `Origin`, or `Origin: null`, must
   say `Sec-Fetch-Site: same-origin`; a request with neither is refused. Another port of the same
   host, a sibling subdomain and a page of the same host under another scheme are other origins.
2. **A token bound to the session.** Every form carries the token of the person's server-side
   session (made with the session, so rotated at sign-in, kept only on the server and in the
   page); without a live session (the sign-in form, a proxied console) the token is an HMAC of a
   random nonce kept in the signed, HttpOnly session cookie (and of the principal a proxy names).
   Compared in constant time. No cookie a script can read holds it.

A refusal is 403 with nothing forwarded to the gateway, logged once with the browser's address."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from effectgate.console.people import SESSION_KEY
from effectgate.console.sessions import SessionStore

log = logging.getLogger("effectgate.console")

FIELD = "csrftoken"  # the hidden field of every form
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_BODY = 64 * 1024  # the console's forms carry a note and a few ids
NONCE_KEY = "n"  # in the signed session cookie, before sign-in
REFUSED = (
    "Refused: this request did not come from a page of this console (another origin, or a form "
    "from an older session). Nothing was done. Reload the page and try again."
)


def origin_of(url: str) -> str:
    """`scheme://host[:port]`, lower case, the default port left out (as browsers send it)."""
    parts = urlsplit(url.strip())
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if not scheme or not host:
        return ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        return ""
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" if port is None or port == default else f"{scheme}://{host}:{port}"


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def client_address(scope: Scope, trusted_proxy: bool) -> str:
    """The browser's address: the socket's, or (behind a trusted proxy only) the first address of
    `X-Forwarded-For`."""
    if trusted_proxy:
        forwarded = _header(scope, b"x-forwarded-for").split(",")[0].strip()
        if forwarded:
            return forwarded
    client = scope.get("client")
    return str(client[0]) if client else "?"


class Guard:
    """Plain ASGI, inside the session middleware (it reads `scope["session"]`)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        secret: str,
        sessions: SessionStore,
        public_url: str = "",
        proxy_header: str = "",
        trusted_proxy: bool = False,
    ) -> None:
        self.app, self.sessions = app, sessions
        self._key = hashlib.sha256(b"effectgate-console-csrf\0" + secret.encode()).digest()
        self._origin = origin_of(public_url) if public_url else ""
        self._proxy_header = proxy_header.lower().encode()
        self._trusted_proxy = trusted_proxy

    def own_origin(self, scope: Scope) -> str:
        if self._origin:
            return self._origin
        host = _header(scope, b"host")
        return origin_of(f"{scope.get('scheme', 'http')}://{host}") if host else ""

    def same_origin(self, scope: Scope) -> bool:
        given = _header(scope, b"origin").strip()
        if given and given != "null":
            own = self.own_origin(scope)
            return bool(own) and origin_of(given) == own
        return _header(scope, b"sec-fetch-site").strip().lower() == "same-origin"

    def token(self, scope: Scope) -> str:
        """The token forms on this request's page carry (made on first use)."""
        session: dict[str, object] = scope.get("session", {})
        found = self.sessions.get(str(session.get(SESSION_KEY, "")))
        if found is not None:
            return found.csrf
        nonce = session.get(NONCE_KEY)
        if not isinstance(nonce, str) or not nonce:
            nonce = secrets.token_urlsafe(24)
            session[NONCE_KEY] = nonce
        principal = _header(scope, self._proxy_header) if self._proxy_header else ""
        mac = hmac.new(self._key, f"{nonce}\0{principal.strip()}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope["csrftoken"] = _lazy(self.token, scope)
        if scope["method"] in SAFE:
            await self.app(scope, receive, send)
            return
        if not self.same_origin(scope):
            await self._refuse(scope, receive, send, "cross-origin")
            return
        body = await _body(receive)
        if body is None:
            await PlainTextResponse("The form is too large.", 413)(scope, receive, send)
            return
        given = _field(scope, body)
        expected = self.token(scope)
        if not given or not hmac.compare_digest(given.encode(), expected.encode()):
            await self._refuse(scope, receive, send, "no token of this session")
            return
        await self.app(scope, _replay(body, receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, why: str) -> None:
        address = client_address(scope, self._trusted_proxy)
        origin = _header(scope, b"origin") or "-"
        log.warning(
            "console: refused %s %s from %s (%s; Origin %s)", scope["method"], scope["path"], address, why, origin
        )
        await PlainTextResponse(REFUSED, 403)(scope, receive, send)


def _lazy(make: Callable[[Scope], str], scope: Scope) -> Callable[[], str]:
    return lambda: make(scope)


async def _body(receive: Receive) -> bytes | None:
    """The whole request body, or None when it is larger than MAX_BODY."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _field(scope: Scope, body: bytes) -> str:
    """The token field of an urlencoded form (the console's forms are nothing else)."""
    kind = _header(scope, b"content-type").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return ""
    values = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).get(FIELD, [])
    return values[0] if len(values) == 1 else ""


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
