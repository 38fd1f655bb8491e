"""The `[[notify]]` tables (docs/notifications.md): one sink each, with what it is sent.

A sink is a `kind` (a Standard Webhooks `webhook`, a `slack` incoming webhook, `email` over SMTP
with the SMTP adapter's keys), filters (`events`, `tools`, `tenants`; empty: all), the console's
public URL its notifications link to, and its retry schedule. Secrets are never values here:
`secret_env`/`secret_file`, `url_env`/`url_file`, `password_env`/`password_file` name where they
live, read when the gateway starts. A key of another kind is an error, not a silent no-op.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from effectgate.gateway.config.durations import Duration
from effectgate.gateway.config.tables import _Table
from effectgate.gateway.model import notify

EventKind = Literal[
    "approval_waiting",
    "approval_decided",
    "approval_expired",
    "unknown_parked",
    "limit_denied",
    "breaker_opened",
    "webhook_forgeries",
]
assert set(EventKind.__args__) == set(notify.KINDS)  # type: ignore[attr-defined]

# The keys each kind reads, beyond the ones every sink has.
KIND_KEYS: dict[str, frozenset[str]] = {
    "webhook": frozenset({"url", "secret_env", "secret_file"}),
    "slack": frozenset({"url_env", "url_file"}),
    "email": frozenset(
        {"host", "port", "username_env", "username_file", "password_env", "password_file", "starttls"}
        | {"from_address", "to"}
    ),
}
# What each kind cannot do without.
KIND_REQUIRED: dict[str, tuple[tuple[str, ...], ...]] = {
    "webhook": (("url",), ("secret_env", "secret_file")),
    "slack": (("url_env", "url_file"),),
    "email": (("host",), ("from_address",), ("to",)),
}


class NotifySink(_Table):
    name: str = Field(min_length=1)
    kind: Literal["webhook", "slack", "email"]
    # Filters: an empty list is everything.
    events: tuple[EventKind, ...] = ()
    tools: frozenset[str] = frozenset()
    tenants: frozenset[str] = frozenset()
    # The console's public URL: each notification links to `<console_url>/actions/<action id>`.
    console_url: str
    # One delivery's timeout; the retries: `backoff` doubling up to `backoff_max`, `max_attempts`
    # in all (then the row is failed, kept for `effectgate notify retry`).
    timeout: Duration = 10.0
    max_attempts: int = Field(default=10, ge=1, le=1000)
    backoff: Duration = 2.0
    backoff_max: Duration = 600.0
    # webhook_forgeries: one notification when `forgeries` webhooks of one adapter are refused
    # within `forgery_window`.
    forgeries: int = Field(default=5, ge=1)
    forgery_window: Duration = 300.0
    # webhook
    url: str = ""
    secret_env: str | None = None
    secret_file: str | None = None
    # slack (the incoming webhook's URL is its secret)
    url_env: str | None = None
    url_file: str | None = None
    # email: the SMTP adapter's keys, and the letter's envelope
    host: str = ""
    port: int = Field(default=25, gt=0, lt=65536)
    username_env: str | None = None
    username_file: str | None = None
    password_env: str | None = None
    password_file: str | None = None
    starttls: bool = False
    from_address: str = ""
    to: tuple[str, ...] = ()

    @field_validator("console_url", "url")
    @classmethod
    def _http(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must be an http(s) URL")
        return value.rstrip("/")

    @field_validator("timeout", "backoff", "backoff_max", "forgery_window")
    @classmethod
    def _positive(cls, seconds: float) -> float:
        if seconds <= 0:
            raise ValueError("must be a positive duration")
        return seconds

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(self.events or notify.KINDS)

    def wants(self, kind: str, tool: str, tenant: str) -> bool:
        """Whether this sink is sent a notification of `kind` for `tool` in `tenant` ("": any)."""
        return (
            kind in self.kinds
            and (not self.tools or not tool or tool in self.tools)
            and (not self.tenants or tenant in self.tenants)
        )

    def problems(self) -> list[str]:
        """The keys set for another kind, and what this kind lacks."""
        found: list[str] = []
        own = KIND_KEYS[self.kind]
        for key in sorted(self.model_fields_set):
            for other, others in KIND_KEYS.items():
                if key in others and key not in own:
                    found.append(f"{key}: only for kind = {other!r} (this sink is {self.kind!r})")
                    break
        for keys in KIND_REQUIRED[self.kind]:
            if not any(getattr(self, key) for key in keys):
                found.append(f"{' or '.join(keys)}: required for kind = {self.kind!r}")
        if self.backoff > self.backoff_max:
            found.append("backoff: must not exceed backoff_max")
        return found
