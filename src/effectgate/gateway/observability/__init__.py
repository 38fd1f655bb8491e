"""Traces, metrics, audit lines and log formatting: called by one-line hooks, never deciding anything."""

from __future__ import annotations

from effectgate.gateway.observability import calls, notify_metrics, provider_metrics
from effectgate.gateway.observability.audit_log import auth_failed
from effectgate.gateway.observability.calls import RpcMetrics, caller, set_caller
from effectgate.gateway.observability.log_lines import IDENTITY, identify, json_line, mask_url, redact
from effectgate.gateway.observability.logging_setup import (
    LEVELS,
    provider_sdk_logs,
    setup_logging,
)
from effectgate.gateway.observability.metrics import (
    APPROVALS,
    BACKLOG,
    MAX_PAGES,
    PAGE,
    Backlog,
    store_error,
    waits_changed,
)

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
