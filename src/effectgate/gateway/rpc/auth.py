"""Callers: bearer tokens checked against the configured SHA-256 digests, roles and tools.

With no principals configured the gateway is in development mode: every caller is the `dev`
principal of tenant `dev` with both roles (the config refuses to bind anything but loopback then).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

from effectgate.gateway.config import Principal
from effectgate.gateway.errors import PermissionDenied, Unauthenticated

DEV_PRINCIPAL = Principal(name="dev", tenant="dev", token_sha256="", roles=frozenset({"agent", "operator"}))


class Authenticator:
    def __init__(self, principals: Sequence[Principal]) -> None:
        self._principals = tuple(principals)

    @property
    def dev_mode(self) -> bool:
        return not self._principals

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None, role: str) -> Principal:
        if self.dev_mode:
            return DEV_PRINCIPAL
        token = ""
        for key, value in metadata or ():
            if key.lower() == "authorization":
                text = value.decode() if isinstance(value, bytes) else value
                scheme, _, token = text.partition(" ")
                if scheme.lower() != "bearer":
                    token = ""
        if not token:
            raise Unauthenticated("missing 'authorization: Bearer <token>' metadata")
        digest = hashlib.sha256(token.encode()).hexdigest()
        # Compare against every principal so timing does not tell which digest came close.
        found = None
        for principal in self._principals:
            if hmac.compare_digest(digest, principal.token_sha256):
                found = principal
        if found is None:
            raise Unauthenticated("unknown token")
        if role not in found.roles:
            raise PermissionDenied(f"principal {found.name} lacks role {role!r}", reason="ROLE_REQUIRED")
        return found

    @staticmethod
    def check_tool(principal: Principal, tool: str) -> None:
        if principal.tools and tool not in principal.tools:
            raise PermissionDenied(f"principal {principal.name} may not use tool {tool!r}", reason="TOOL_NOT_ALLOWED")
