"""The configuration: the TOML file parsed into typed settings, with errors a person can act on."""

from __future__ import annotations

from effectgate.gateway.config.provider import AuditSection, ConsistencySection, WebhooksSection
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
    load_config,
    parse_config,
    parse_duration,
)
from effectgate.gateway.config.tables import TlsConfig
from effectgate.gateway.config.telemetry import TelemetryConfig

__all__ = [
    "ROLES",
    "STORE_GROUP",
    "Approval",
    "AuditSection",
    "Bypass",
    "Config",
    "ConfigError",
    "ConsistencySection",
    "OnMismatch",
    "OnRepeat",
    "Principal",
    "TelemetryConfig",
    "TlsConfig",
    "ToolConfig",
    "WebhooksSection",
    "load_config",
    "parse_config",
    "parse_duration",
]
