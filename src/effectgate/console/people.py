"""Who is asking: the signed-in session (the cookie's id -> the server-side session), or, behind
a trusted reverse proxy, the principal its header names, mapped to a configured token."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from effectgate.console.door.throttle import SignInThrottle
from effectgate.console.link import GatewayLink, SignInRefused
from effectgate.console.sessions import SessionStore
from effectgate.console.settings import ConsoleSettings

SESSION_KEY = "sid"  # in the (signed, HttpOnly) session cookie; before sign-in, only a CSRF nonce


@dataclass(frozen=True)
class Person:
    token: str
    role: str
    principal: str

    @property
    def operator(self) -> bool:
        return self.role == "operator"


class People:
    def __init__(self, settings: ConsoleSettings, link: GatewayLink, sessions: SessionStore) -> None:
        self.settings, self.link, self.sessions = settings, link, sessions
        self._proxy_roles: dict[str, str] = {}  # principal -> role, asked once per process
        self.throttle = SignInThrottle()  # failed sign-ins per browser address and token digest

    @property
    def proxied(self) -> bool:
        return bool(self.settings.proxy_header)

    async def of(self, request: Request) -> Person | None:
        if self.proxied:
            return await self._from_proxy(request)
        session = self.sessions.get(request.session.get(SESSION_KEY))
        if session is None:
            return None
        return Person(session.token, session.role, session.principal)

    async def sign_in(self, request: Request, token: str) -> Person:
        """Asks the gateway what the token may do; a new session (a new id: no fixation)."""
        role = await self.link.role_of(token)
        self.sign_out(request)
        request.session[SESSION_KEY] = self.sessions.open(token, role, "")
        return Person(token, role, "")

    def sign_out(self, request: Request) -> None:
        self.sessions.close(request.session.get(SESSION_KEY))
        request.session.clear()

    async def _from_proxy(self, request: Request) -> Person | None:
        name = request.headers.get(self.settings.proxy_header, "").strip()
        token = self.settings.proxy_tokens.get(name)
        if not name or token is None:
            return None
        role = self._proxy_roles.get(name)
        if role is None:
            try:
                role = await self.link.role_of(token)
            except SignInRefused:
                return None
            self._proxy_roles[name] = role
        return Person(token, role, name)
