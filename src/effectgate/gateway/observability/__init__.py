"""Traces, metrics, audit lines and log formatting: called by one-line hooks, never deciding anything.

Log formatting and set-up are loaded with the package; the rest on first use (`__getattr__`): the
operator commands (`effectgate actions`, ...) set up logging through this package, and the call
metrics load the config and the model (a fifth of a second of imports they never use).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from effectgate.gateway.observability.log_lines import IDENTITY, identify, json_line, mask_url, redact
from effectgate.gateway.observability.logging_setup import (
    LEVELS,
    provider_sdk_logs,
    setup_logging,
)

if TYPE_CHECKING:
    from effectgate.gateway.observability import calls, notify_metrics, provider_metrics
    from effectgate.gateway.observability.audit_log import auth_failed
    from effectgate.gateway.observability.calls import RpcMetrics, caller, set_caller
    from effectgate.gateway.observability.metrics import (
        APPROVALS,
        BACKLOG,
        MAX_PAGES,
        PAGE,
        Backlog,
        store_error,
        waits_changed,
    )

# Each name loaded on first use, by the module that defines it.
LAZY = {
    "auth_failed": "audit_log",
    "RpcMetrics": "calls",
    "caller": "calls",
    "set_caller": "calls",
    "APPROVALS": "metrics",
    "BACKLOG": "metrics",
    "MAX_PAGES": "metrics",
    "PAGE": "metrics",
    "Backlog": "metrics",
    "store_error": "metrics",
    "waits_changed": "metrics",
}

__all__ = [
    "APPROVALS",
    "BACKLOG",
    "IDENTITY",
    "LEVELS",
    "MAX_PAGES",
    "PAGE",
    "Backlog",
    "RpcMetrics",
    "auth_failed",
    "caller",
    "calls",
    "identify",
    "json_line",
    "mask_url",
    "notify_metrics",
    "provider_metrics",
    "provider_sdk_logs",
    "redact",
    "set_caller",
    "setup_logging",
    "store_error",
    "waits_changed",
]


def __getattr__(name: str) -> object:
    module = LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    if name in ("calls", "notify_metrics", "provider_metrics"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
