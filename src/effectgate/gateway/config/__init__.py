"""The configuration: the TOML file parsed into typed settings, with errors a person can act on."""

from __future__ import annotations

from effectgate.gateway.config.limits import MAX_CAP, BreakerConfig, OnUnique, ToolLimits, Unique
from effectgate.gateway.config.loading import load_config, parse_config
from effectgate.gateway.config.notify import NotifySink
from effectgate.gateway.config.provider import WEBHOOKS_LISTEN, AuditSection, ConsistencySection, WebhooksSection
from effectgate.gateway.config.schema import (
    ROLES,
    STORE_GROUP,
    Approval,
    Bypass,
    Config,
    ConfigError,
    OnMismatch,
    OnRepeat,
    Principal,
    ToolConfig,
    host_port,
    parse_duration,
    unix_path,
)
from effectgate.gateway.config.tables import TlsConfig
from effectgate.gateway.config.telemetry import PROMETHEUS_LISTEN, TelemetryConfig

__all__ = [
    "MAX_CAP",
    "PROMETHEUS_LISTEN",
    "ROLES",
    "STORE_GROUP",
    "WEBHOOKS_LISTEN",
    "Approval",
    "AuditSection",
    "BreakerConfig",
    "Bypass",
    "Config",
    "ConfigError",
    "ConsistencySection",
    "NotifySink",
    "OnMismatch",
    "OnRepeat",
    "OnUnique",
    "Principal",
    "TelemetryConfig",
    "TlsConfig",
    "ToolConfig",
    "ToolLimits",
    "Unique",
    "WebhooksSection",
    "host_port",
    "load_config",
    "parse_config",
    "parse_duration",
    "unix_path",
]
