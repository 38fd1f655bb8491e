"""Traces, metrics, audit lines and log formatting: called by one-line hooks, never deciding anything."""

from __future__ import annotations

from effectgate.gateway.observability import provider_metrics
from effectgate.gateway.observability.logging_setup import LEVELS, mask_url, provider_sdk_logs, redact, setup_logging
from effectgate.gateway.observability.metrics import BACKLOG, MAX_PAGES, PAGE, Backlog, store_error

__all__ = [
    "BACKLOG",
    "LEVELS",
    "MAX_PAGES",
    "PAGE",
    "Backlog",
    "mask_url",
    "provider_metrics",
    "provider_sdk_logs",
    "redact",
    "setup_logging",
    "store_error",
]
