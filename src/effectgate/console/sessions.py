"""Server-side sessions: the bearer token a person signed in with stays here, in memory; the
browser's cookie carries only a random session id. Each session holds its own CSRF token.
Bounded (the oldest session is dropped when full) and expiring (idle for `idle`, or older than `lifetime`)."""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Session:
    token: str
    role: str  # "operator" or "observer", as the gateway answered at sign-in
    principal: str  # a name to show ("": the gateway does not tell the console who a token is)
    created: float
    seen: float = field(default=0.0)
    # The CSRF token of this session's forms (console/csrf.py): made with the session, so a new
    # one at every sign-in; kept here and in the pages, never in a cookie.
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))


class SessionStore:
    def __init__(
        self,
        *,
        limit: int = 1000,
        idle: float = 30 * 60,
        lifetime: float = 12 * 3600,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.idle, self.lifetime, self.clock = limit, idle, lifetime, clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, token: str, role: str, principal: str) -> str:
        """A new session; its id (32 random bytes) is what the cookie holds."""
        now = self.clock()
        session_id = secrets.token_urlsafe(32)
        self._sessions[session_id] = Session(token, role, principal, created=now, seen=now)
        while len(self._sessions) > self.limit:
            self._sessions.popitem(last=False)
        return session_id

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id (its idle timer restarts), else None (expired ones are dropped)."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self.clock()
        if now - session.seen > self.idle or now - session.created > self.lifetime:
            del self._sessions[session_id]
            return None
        session.seen = now
        self._sessions.move_to_end(session_id)  # the least recently used goes first when full
        return session

    def close(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)
