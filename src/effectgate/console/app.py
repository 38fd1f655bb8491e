"""The console's ASGI app: routes, the session cookie (a signed random id, nothing else), CSRF
on every POST (csrf.py: same origin, and a token bound to the server-side session), and the
security headers of every answer (a Content-Security-Policy with no inline script)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from effectgate.console import audit, decide, live, pages, signin
from effectgate.console.door.csrf import Guard
from effectgate.console.link import GatewayLink
from effectgate.console.people import People
from effectgate.console.sessions import SessionStore
from effectgate.console.settings import ConsoleSettings
from effectgate.console.web import Parts

# Scripts only from the console itself (htmx, vendored); no inline script or style, no frames.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    # Not no-referrer: under it a browser sends `Origin: null` on the console's own POSTs.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    """Plain ASGI (not BaseHTTPMiddleware), so the live feed streams through it untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


async def home(request: Request) -> Response:
    return RedirectResponse("/inbox", status_code=303)


def build_app(settings: ConsoleSettings, sessions: SessionStore | None = None) -> ASGIApp:
    link = GatewayLink(settings)
    store = sessions or SessionStore(
        limit=settings.session_limit, idle=settings.session_idle, lifetime=settings.session_lifetime
    )
    parts = Parts(settings, link, People(settings, link, store))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        link.open()
        try:
            yield
        finally:
            await link.close()

    routes = [
        Route("/", home),
        Route("/login", signin.login_page, methods=["GET"]),
        Route("/login", signin.login, methods=["POST"]),
        Route("/logout", signin.logout, methods=["POST"]),
        Route("/inbox", pages.inbox),
        Route("/inbox/rows", pages.inbox_fragment),
        Route("/inbox/events", live.inbox_events),
        Route("/actions", pages.actions),
        Route("/actions/{action_id}", pages.action),
        Route("/actions/{action_id}/{verb}/confirm", decide.confirm, methods=["POST"]),
        Route("/actions/{action_id}/{verb}", decide.decide, methods=["POST"]),
        Route("/audit", audit.audit),
        Mount("/static", StaticFiles(directory=str(Path(__file__).parent / "static")), name="static"),
    ]
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(
            SessionMiddleware,
            secret_key=settings.secret,
            session_cookie="effectgate_console",
            max_age=int(settings.session_lifetime),
            same_site="strict",
            https_only=settings.https,
        ),
        Middleware(
            Guard,
            secret=settings.secret,
            sessions=store,
            public_url=settings.public_url,
            proxy_header=settings.proxy_header,
            trusted_proxy=settings.trusted_proxy,
        ),
    ]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.parts = parts
    return app
