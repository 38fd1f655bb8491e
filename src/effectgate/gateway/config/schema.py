"""The TOML configuration as a typed schema: server, store, gateway, principals, adapters, tools.

Every table is a pydantic model that forbids unknown keys, so a typo (`lease_tll`, `[store] ulr`,
a principal's `tool`) is an error naming the file, the key and what is allowed, never a silent
default. The defaults live here and nowhere else. `[adapters.NAME]` tables are passed through to
each adapter's own settings parser (see server.build_adapters). Policies are configuration, never
model opinion: agents cannot change them per call.
"""

from __future__ import annotations

import enum
import hashlib
import ipaddress
import json
import re
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator

from effectgate.adapters import plugins
from effectgate.adapters.base import ConfigError
from effectgate.gateway.config.durations import Duration, parse_duration
from effectgate.gateway.config.limits import BreakerConfig, ToolLimits
from effectgate.gateway.config.notify import NotifySink
from effectgate.gateway.config.provider import AuditSection, ConsistencySection, WebhooksSection
from effectgate.gateway.config.tables import TlsConfig, _Table
from effectgate.gateway.config.telemetry import TelemetryConfig

__all__ = [
    "Approval",
    "BreakerConfig",
    "Bypass",
    "Config",
    "ConfigError",
    "OnMismatch",
    "OnRepeat",
    "Principal",
    "TlsConfig",
    "ToolConfig",
    "ToolLimits",
    "is_loopback",
    "parse_duration",
    "unix_path",
]

# Store backends are plug-ins, found by URL scheme in this entry-point group (store/registry.py).
STORE_GROUP = "effectgate.stores"
# `[server] listen = "unix:PATH"`: gRPC's spelling of a Unix socket's address (sockaddr_un's
# sun_path holds 108 bytes with its NUL).
UNIX = "unix:"
UNIX_PATH_MAX = 107
ROLES = ("agent", "operator", "observer")


def store_schemes() -> list[str]:
    """The store URL schemes installed now (a backend installed meanwhile counts: plugins.read)."""
    return sorted(plugins.installed(STORE_GROUP))


class OnRepeat(enum.Enum):
    COALESCE = "coalesce"
    REFUSE = "refuse"
    ALLOW = "allow"


class OnMismatch(enum.Enum):
    REFUSE = "refuse"
    COALESCE = "coalesce"


class Bypass(enum.Enum):
    NEVER = "never"
    OPERATOR = "operator"


class Approval(enum.Enum):
    NONE = "none"
    REQUIRED = "required"


class ToolConfig(_Table):
    # Set from the table's name ([tools.NAME]); not a key of the table.
    name: str = Field(default="", exclude=True)
    adapter: str
    on_repeat: OnRepeat = OnRepeat.COALESCE
    on_mismatch: OnMismatch = OnMismatch.REFUSE
    bypass: Bypass = Bypass.NEVER
    approval: Approval = Approval.NONE
    # None: use the adapter's declared window; "auto": learn it (the observed p99 read lag with a
    # floor and a margin, [consistency]; docs/webhooks.md).
    consistency_window: Duration | Literal["auto"] | None = None
    # How long the provider may still apply a request after our call to it ended (None: the
    # adapter's declared bound); the consistency window starts after it (docs/protocol.md).
    keeps_processing: Duration | None = None
    # The read lags this tool learns from and records under (default: its adapter's name).
    lag_key: str = ""
    # Budget of one Execute when the caller sets no deadline.
    deadline: Duration = 30.0
    # Provider calls per action before it stops retrying on its own.
    max_attempts: int = Field(default=3, ge=1)
    # Timeout of one provider call (never cut by the caller's deadline: docs/protocol.md).
    attempt_timeout: Duration = 10.0
    # Terminal actions older than this are purged (must outlive the provider's key retention).
    retention: Duration = 30 * 86400.0
    # Limits agents cannot exceed, and the provider's circuit breaker (docs/limits.md).
    limits: ToolLimits = ToolLimits()
    breaker: BreakerConfig | None = None
    # With approval = "required": how long an action may wait before it expires into REJECTED
    # (None: never), and how many distinct principals must approve it.
    approval_ttl: Duration | None = None
    approvals: int = Field(default=1, ge=1, le=10)
    # Payload fields masked when operators and observers read an action (None: the payload
    # type's default, e.g. ChargeCard's payment_method).
    sensitive: tuple[str, ...] | None = None

    @property
    def policy_version(self) -> str:
        """A digest of this tool's policy as loaded: an approval binds to it, and a change of the
        tool's table while an action waits requires a new approval (docs/states.md)."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return "pv_" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


Role = Literal["agent", "operator", "observer"]


class Principal(_Table):
    name: str = Field(min_length=1)
    tenant: str = Field(min_length=1)
    token_sha256: str
    roles: frozenset[Role] = Field(default=frozenset({"agent"}), min_length=1)
    # Empty: every configured tool.
    tools: frozenset[str] = frozenset()

    @field_validator("token_sha256")
    @classmethod
    def _digest(cls, value: str) -> str:
        # Never echo the value: people paste the token itself here by mistake.
        if not re.fullmatch(r"[0-9a-fA-F]{64}", value):
            raise ValueError("must be the hex SHA-256 digest of the token (64 hex characters), not the token")
        return value.lower()


class ServerSection(_Table):
    listen: str = "127.0.0.1:50051"
    tls: TlsConfig | None = None
    # Principals on a non-loopback listener without TLS: refused unless this is true.
    allow_plaintext: bool = False
    max_message_bytes: int = Field(default=1 << 20, ge=4096)
    shutdown_grace: Duration = 10.0

    @field_validator("listen")
    @classmethod
    def _address(cls, value: str) -> str:
        if value.startswith(UNIX):
            return _unix_address(value)
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError(
                f"{value!r} is not HOST:PORT (e.g. '127.0.0.1:50051', '0.0.0.0:50051', '[::1]:0') "
                "nor unix:PATH (e.g. 'unix:/run/effectgate/grpc.sock')"
            )
        return value


class StoreSection(_Table):
    url: str = "sqlite:///effectgate.db"
    # "auto": `serve` and `check` apply missing migrations at start-up (one process at a time);
    # "never": they refuse a schema that is behind, and `effectgate migrate` applies it (a
    # migration step with a role that may change the schema; docs/production.md).
    migrate: Literal["auto", "never"] = "auto"

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        scheme = value.split(":", 1)[0].lower() if ":" in value else ""
        installed = store_schemes()
        if scheme not in installed:
            raise ValueError(
                f"unsupported scheme {scheme or value!r} (installed: {', '.join(installed) or 'none'}; "
                "e.g. sqlite:///PATH, postgresql://USER@HOST/DB)"
            )
        return value


# The derived clock-skew bound's share of the lease's safety margin (see `Config.clock_skew_bound`).
SKEW_FRACTION = 0.25


class GatewaySection(_Table):
    # How long a worker may drive an action before others take over.
    lease_ttl: Duration = 30.0
    reconcile_interval: Duration = 5.0
    # UNKNOWN re-check back-off: recheck_min, doubling up to recheck_max.
    recheck_min: Duration = 2.0
    recheck_max: Duration = 3600.0
    retention_interval: Duration = 3600.0
    # The readiness probe (a tiny store write) runs this often; health follows it.
    health_interval: Duration = 2.0
    # How far this host's clock may be from the store's before the replica stops claiming and
    # sending; unset: `Config.clock_skew_bound` derives it from the lease and the attempt budgets.
    max_clock_skew: Duration | None = None
    # Size limits of caller-supplied identifiers (run_id, step_id, scope, …) and operator notes.
    max_id_bytes: int = Field(default=256, ge=16, le=4096)
    max_note_bytes: int = Field(default=4096, ge=64, le=65536)
    # How often the notifications' deliverer looks for new events and due retries ([[notify]]).
    notify_interval: Duration = 1.0


class Config(_Table):
    server: ServerSection = ServerSection()
    store: StoreSection = StoreSection()
    gateway: GatewaySection = GatewaySection()
    principals: tuple[Principal, ...] = ()
    # Each adapter validates its own table (build_adapter); `kind` defaults to the table name.
    adapters: dict[str, dict[str, Any]] = {}
    tools: dict[str, ToolConfig] = {}
    telemetry: TelemetryConfig = TelemetryConfig()
    # The webhook listener (off unless configured), the learned consistency window, the drift audit.
    webhooks: WebhooksSection | None = None
    consistency: ConsistencySection = ConsistencySection()
    audit: AuditSection = AuditSection()
    # Notification sinks (docs/notifications.md).
    notify: tuple[NotifySink, ...] = ()
    # Read and validated by `effectgate mcp` (the MCP front door); the gateway itself ignores it.
    mcp: dict[str, Any] = {}
    # The file the config came from, for error messages.
    _source: str = PrivateAttr(default="effectgate.toml")

    @property
    def source(self) -> str:
        return self._source

    # Flat names the rest of the gateway reads.
    @property
    def listen(self) -> str:
        return self.server.listen

    @property
    def tls(self) -> TlsConfig | None:
        return self.server.tls

    @property
    def max_message_bytes(self) -> int:
        return self.server.max_message_bytes

    @property
    def shutdown_grace(self) -> float:
        return self.server.shutdown_grace

    @property
    def store_url(self) -> str:
        return self.store.url

    @property
    def lease_ttl(self) -> float:
        return self.gateway.lease_ttl

    @property
    def reconcile_interval(self) -> float:
        return self.gateway.reconcile_interval

    @property
    def recheck_min(self) -> float:
        return self.gateway.recheck_min

    @property
    def recheck_max(self) -> float:
        return self.gateway.recheck_max

    @property
    def clock_skew_bound(self) -> float:
        """The clock skew (host vs store) above which a replica refuses work (docs/protocol.md,
        "Clocks"): `gateway.max_clock_skew`, else SKEW_FRACTION of the lease's safety margin,
        lease_ttl minus the longest attempt_timeout (the time a takeover waits beyond a call that
        may still be in flight)."""
        if self.gateway.max_clock_skew is not None:
            return self.gateway.max_clock_skew
        longest = max((tool.attempt_timeout for tool in self.tools.values()), default=0.0)
        return SKEW_FRACTION * max(self.lease_ttl - longest, 0.0)

    @property
    def clock_probe_interval(self) -> float:
        """How often a replica re-measures its offset to the store's clock: at least once per
        reconcile interval (and per health interval)."""
        return min(self.reconcile_interval, self.gateway.health_interval)

    @property
    def retention_interval(self) -> float:
        return self.gateway.retention_interval

    @property
    def dev_mode(self) -> bool:
        """No principals: single-tenant development mode, loopback only."""
        return not self.principals

    def with_port(self, port: int) -> Config:
        """The same config listening on `port` of the same host (a Unix socket: unchanged)."""
        if unix_path(self.listen):
            return self
        listen = f"{self.listen.rpartition(':')[0]}:{port}"
        changed = self.model_copy(update={"server": self.server.model_copy(update={"listen": listen})})
        changed._source = self._source
        return changed

    @property
    def plaintext_exposed(self) -> bool:
        """Bearer tokens would cross a non-loopback network in the clear."""
        return bool(self.principals) and self.tls is None and not is_loopback(self.listen)


def host_port(host: str, port: int) -> str:
    """HOST:PORT as the gateway writes an address ([::1]:9464 for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def unix_path(listen: str) -> str:
    """The socket's path of a `unix:PATH` address; "" for HOST:PORT."""
    return listen[len(UNIX) :] if listen.startswith(UNIX) else ""


def _unix_address(value: str) -> str:
    path = unix_path(value)
    if not path.startswith("/"):
        raise ValueError(f"{value!r}: a Unix socket's path must be absolute (e.g. 'unix:/run/effectgate/grpc.sock')")
    if len(path.encode()) > UNIX_PATH_MAX:
        raise ValueError(f"{value!r}: a Unix socket's path is at most {UNIX_PATH_MAX} bytes (the kernel's limit)")
    return value


def is_loopback(listen: str) -> bool:
    """Reachable from this host only: a loopback address, or a Unix socket (a file on this host,
    reachable by the processes its permissions let in, e.g. a sidecar sharing the volume)."""
    if listen.startswith(UNIX):
        return True
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
