"""Callers: bearer tokens checked against the configured SHA-256 digests, roles and tools.

With no principals configured the gateway is in development mode: every caller is the `dev`
principal of tenant `dev` with every role (the config refuses to bind anything but loopback then).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence

from effectgate.gateway.config import ROLES, ConfigError, Principal
from effectgate.gateway.model import PermissionDenied, Unauthenticated
from effectgate.gateway.observability import caller, set_caller

DEV_PRINCIPAL = Principal.model_construct(
    name="dev", tenant="dev", token_sha256="", roles=frozenset(ROLES), tools=frozenset()
)

# The authenticated caller of the RPC being handled lives with the audit trail, which names it.
current_principal = caller  # only valid inside a handler behind the admission wrapper
set_current_principal = set_caller


class Authenticator:
    def __init__(self, principals: Sequence[Principal]) -> None:
        self._principals = tuple(principals)

    @property
    def dev_mode(self) -> bool:
        return not self._principals

    def replace(self, principals: Sequence[Principal]) -> None:
        """A new set of principals (SIGHUP). One assignment: a call is checked against the old set
        or the new one, never a mix. Development mode can neither start nor end here."""
        if bool(principals) != bool(self._principals):
            raise ConfigError("[[principals]]: going to or from development mode (no principals) needs a restart")
        self._principals = tuple(principals)

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None, roles: frozenset[str]) -> Principal:
        """The principal whose token the metadata carries, if it holds one of `roles`."""
        if self.dev_mode:
            return DEV_PRINCIPAL
        token, cause = "", "missing"
        for key, value in metadata or ():
            if key.lower() == "authorization":
                text = value.decode(errors="replace") if isinstance(value, bytes) else value
                scheme, _, token = text.partition(" ")
                if scheme.lower() != "bearer" or not token:
                    token, cause = "", "malformed"
        if not token and cause == "malformed":
            raise Unauthenticated("the 'authorization' metadata is not 'Bearer <token>'", cause)
        if not token:
            raise Unauthenticated("missing 'authorization: Bearer <token>' metadata", cause)
        digest = hashlib.sha256(token.encode()).hexdigest()
        # Compare against every principal so timing does not tell which digest came close.
        found = None
        for principal in self._principals:
            if hmac.compare_digest(digest, principal.token_sha256):
                found = principal
        if found is None:
            raise Unauthenticated("unknown token", "unknown_token")
        if not found.roles & roles:
            wanted = " or ".join(repr(r) for r in sorted(roles))
            raise PermissionDenied(
                f"principal {found.name} needs role {wanted} (its roles: {', '.join(sorted(found.roles))}; "
                "roles are set in the principal's [[principals]] entry)",
                reason="ROLE_REQUIRED",
                principal=found.name,
            )
        return found

    @staticmethod
    def check_tool(principal: Principal, tool: str) -> None:
        if principal.tools and tool not in principal.tools:
            allowed = ", ".join(sorted(principal.tools))
            raise PermissionDenied(
                f"principal {principal.name} may not use tool {tool!r}: its tools are {allowed} "
                f"(add {tool!r} to this principal's tools in the config to allow it)",
                reason="TOOL_NOT_ALLOWED",
                principal=principal.name,
            )
