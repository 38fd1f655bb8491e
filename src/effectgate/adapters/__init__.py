"""The adapter plug-in API: what a provider package needs to add a tool to effectgate.

A provider ships an `Adapter` subclass, declares it in the `effectgate.adapters` entry-point
group, reads its `[adapters.NAME]` table with `parse_settings` into an `AdapterSettings` model,
resolves credentials with `AdapterSettings.secret` (never from agents), scrubs what the provider
sends back with `scrub` / `scrub_json`, and proves itself with `effectgate.adapters.testing`.

Nothing here imports a provider library: the built-in adapters (`stripe`, `postmark`, `smtp`,
`http`, `square`, `mcp`) are loaded by kind, only when configured. `AdapterSettings` and
`parse_settings` (pydantic) are loaded on first use: the operator commands set up logging through
`effectgate.adapters.secrets`, and pydantic is a tenth of a second of imports they never use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from effectgate.adapters.base import (
    ActionCall,
    Adapter,
    AdapterError,
    AmbiguousError,
    Capabilities,
    ConfigError,
    CredentialsRefused,
    DefinitiveError,
    InvalidPayload,
    JsonDict,
    NoEffectError,
    Observation,
    Outcome,
    RateLimited,
    Receipt,
)
from effectgate.adapters.http_outcome import retry_after, status_error, transport_error
from effectgate.adapters.redact import scrub, scrub_json
from effectgate.adapters.registry import adapter_class, build_adapter, installed
from effectgate.adapters.secrets import (
    quiet_transport_loggers,
    read_secret,
    register_secret,
    resolved_secrets,
)

if TYPE_CHECKING:
    from effectgate.adapters.settings import AdapterSettings, parse_settings

__all__ = [
    "ActionCall",
    "Adapter",
    "AdapterError",
    "AdapterSettings",
    "AmbiguousError",
    "Capabilities",
    "ConfigError",
    "CredentialsRefused",
    "DefinitiveError",
    "InvalidPayload",
    "JsonDict",
    "NoEffectError",
    "Observation",
    "Outcome",
    "RateLimited",
    "Receipt",
    "adapter_class",
    "build_adapter",
    "installed",
    "parse_settings",
    "quiet_transport_loggers",
    "read_secret",
    "register_secret",
    "resolved_secrets",
    "retry_after",
    "scrub",
    "scrub_json",
    "status_error",
    "transport_error",
]


def __getattr__(name: str) -> object:
    if name in ("AdapterSettings", "parse_settings"):
        from effectgate.adapters import settings

        return getattr(settings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
