"""Config tables for what providers say on their own (docs/webhooks.md): `[webhooks]` (the
listener), `[consistency]` (the learned window) and `[audit]` (the periodic drift audit)."""

from __future__ import annotations

from pydantic import Field, field_validator

from effectgate.gateway.config.durations import Duration
from effectgate.gateway.config.tables import TlsConfig, _Table

# The setting's name, as the lines about its address say it.
WEBHOOKS_LISTEN = "[webhooks] listen"


class WebhooksSection(_Table):
    # HTTP (or HTTPS with [webhooks.tls]); one route per adapter: POST /webhooks/<adapter name>.
    listen: str = "127.0.0.1:8443"
    tls: TlsConfig | None = None
    max_body_bytes: int = Field(default=1 << 20, ge=1024)

    @field_validator("listen")
    @classmethod
    def _address(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"{value!r} is not HOST:PORT (e.g. '127.0.0.1:8443')")
        return value


class ConsistencySection(_Table):
    # One confirmed write in `sample_every` is followed by read-backs until its read API shows it
    # (0: never; the lag is then learned from nothing).
    sample_every: int = Field(default=100, ge=0)
    # How long a probe keeps reading before it gives up (the lag is then at least this).
    probe_limit: Duration = 300.0
    # `consistency_window = "auto"`: max(floor, p99 x (1 + margin)) once min_samples are known;
    # the adapter's declared window until then.
    floor: Duration = 1.0
    margin: float = Field(default=0.5, ge=0)
    min_samples: int = Field(default=20, ge=1)


class AuditSection(_Table):
    # The periodic drift audit (0: off); each pass looks back `since`.
    interval: Duration = 0.0
    since: Duration = 86400.0
