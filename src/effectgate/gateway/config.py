"""The TOML configuration: server, store, principals, adapters, tools and their policies.

Policies are configuration, never model opinion: agents cannot change them per call.
"""

from __future__ import annotations

import enum
import ipaddress
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effectgate.gateway.telemetry_config import TelemetryConfig, parse_telemetry

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


class ConfigError(ValueError):
    """The configuration file is invalid; the message names the key."""


def parse_duration(value: object, key: str) -> float:
    """'2s', '500ms', '5m', '1h', '30d' or a number of seconds -> seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ConfigError(f"{key}: {value!r} is not a duration (e.g. '2s', '500ms', '1h')")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


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


@dataclass(frozen=True)
class ToolConfig:
    name: str
    adapter: str
    on_repeat: OnRepeat = OnRepeat.COALESCE
    on_mismatch: OnMismatch = OnMismatch.REFUSE
    bypass: Bypass = Bypass.NEVER
    approval: Approval = Approval.NONE
    # None: use the adapter's declared window.
    consistency_window: float | None = None
    # Budget of one Execute when the caller sets no deadline.
    deadline: float = 30.0
    # Provider calls per action before it stops retrying on its own.
    max_attempts: int = 3
    # Timeout of one provider call (also capped by the caller's deadline).
    attempt_timeout: float = 10.0
    # Terminal actions older than this are purged (must outlive the provider's key retention).
    retention: float = 30 * 86400.0


@dataclass(frozen=True)
class Principal:
    name: str
    tenant: str
    token_sha256: str
    roles: frozenset[str]
    # Empty: every configured tool.
    tools: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TlsConfig:
    cert_file: str
    key_file: str
    client_ca_file: str = ""


@dataclass(frozen=True)
class Config:
    listen: str = "127.0.0.1:50051"
    store_url: str = "sqlite:///effectgate.db"
    tls: TlsConfig | None = None
    max_message_bytes: int = 1 << 20
    shutdown_grace: float = 10.0
    lease_ttl: float = 30.0
    reconcile_interval: float = 5.0
    recheck_min: float = 2.0
    recheck_max: float = 3600.0
    retention_interval: float = 3600.0
    principals: tuple[Principal, ...] = ()
    adapters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    tools: Mapping[str, ToolConfig] = field(default_factory=dict)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)

    @property
    def dev_mode(self) -> bool:
        """No principals: single-tenant development mode, loopback only."""
        return not self.principals


def _enum(kind: type[enum.Enum], table: Mapping[str, Any], key: str, where: str) -> Any:
    raw = table.get(key)
    if raw is None:
        return None
    try:
        return kind(str(raw))
    except ValueError:
        allowed = ", ".join(str(m.value) for m in kind)
        raise ConfigError(f"{where}.{key}: {raw!r} is not one of {allowed}") from None


def _tool(name: str, table: Mapping[str, Any], adapters: Mapping[str, Any]) -> ToolConfig:
    where = f"tools.{name}"
    adapter = table.get("adapter")
    if not adapter or adapter not in adapters:
        raise ConfigError(f"{where}.adapter: {adapter!r} is not an [adapters.*] table")
    values: dict[str, Any] = {"name": name, "adapter": str(adapter)}
    for key, kind in (
        ("on_repeat", OnRepeat),
        ("on_mismatch", OnMismatch),
        ("bypass", Bypass),
        ("approval", Approval),
    ):
        parsed = _enum(kind, table, key, where)
        if parsed is not None:
            values[key] = parsed
    for key in ("consistency_window", "deadline", "attempt_timeout", "retention"):
        if key in table:
            values[key] = parse_duration(table[key], f"{where}.{key}")
    if "max_attempts" in table:
        values["max_attempts"] = int(table["max_attempts"])
        if values["max_attempts"] < 1:
            raise ConfigError(f"{where}.max_attempts must be at least 1")
    unknown = set(table) - {"adapter", *values, "max_attempts"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    return ToolConfig(**values)


def _principal(index: int, table: Mapping[str, Any]) -> Principal:
    where = f"principals[{index}]"
    for key in ("name", "tenant", "token_sha256"):
        if not table.get(key):
            raise ConfigError(f"{where}.{key} is required")
    digest = str(table["token_sha256"]).lower()
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise ConfigError(f"{where}.token_sha256 must be a hex SHA-256 digest")
    roles = frozenset(str(r) for r in table.get("roles", ["agent"]))
    if not roles <= {"agent", "operator"}:
        raise ConfigError(f"{where}.roles: only 'agent' and 'operator' exist")
    return Principal(
        name=str(table["name"]),
        tenant=str(table["tenant"]),
        token_sha256=digest,
        roles=roles,
        tools=frozenset(str(t) for t in table.get("tools", [])),
    )


def is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_config(doc: Mapping[str, Any]) -> Config:
    server = doc.get("server", {})
    gateway = doc.get("gateway", {})
    adapters = {str(k): dict(v) for k, v in doc.get("adapters", {}).items()}
    tools = {str(k): _tool(str(k), v, adapters) for k, v in doc.get("tools", {}).items()}
    principals = tuple(_principal(i, p) for i, p in enumerate(doc.get("principals", [])))
    tls = server.get("tls")
    config = Config(
        listen=str(server.get("listen", Config.listen)),
        store_url=str(doc.get("store", {}).get("url", Config.store_url)),
        tls=TlsConfig(**tls) if tls else None,
        max_message_bytes=int(server.get("max_message_bytes", Config.max_message_bytes)),
        shutdown_grace=parse_duration(server.get("shutdown_grace", 10), "server.shutdown_grace"),
        lease_ttl=parse_duration(gateway.get("lease_ttl", 30), "gateway.lease_ttl"),
        reconcile_interval=parse_duration(gateway.get("reconcile_interval", 5), "gateway.reconcile_interval"),
        recheck_min=parse_duration(gateway.get("recheck_min", 2), "gateway.recheck_min"),
        recheck_max=parse_duration(gateway.get("recheck_max", 3600), "gateway.recheck_max"),
        retention_interval=parse_duration(gateway.get("retention_interval", 3600), "gateway.retention_interval"),
        principals=principals,
        adapters=adapters,
        tools=tools,
        telemetry=parse_telemetry(doc.get("telemetry")),
    )
    if config.dev_mode and not is_loopback(config.listen):
        raise ConfigError(
            "server.listen: with no [[principals]] the gateway runs in development mode and "
            "binds to loopback only; configure principals to listen on other addresses"
        )
    for tool in tools.values():
        if tool.attempt_timeout >= config.lease_ttl:
            raise ConfigError(f"tools.{tool.name}.attempt_timeout must be shorter than gateway.lease_ttl")
    return config


def load_config(path: str | Path) -> Config:
    try:
        with open(path, "rb") as handle:
            doc = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return parse_config(doc)
