"""Traces, metrics, audit lines and log formatting: called by one-line hooks, never deciding anything."""

from __future__ import annotations

from effectgate.gateway.observability.logging_setup import (
    IDENTITY,
    LEVELS,
    identify,
    json_line,
    mask_url,
    provider_sdk_logs,
    redact,
    setup_logging,
)
from effectgate.gateway.observability.metrics import BACKLOG, MAX_PAGES, PAGE, Backlog, store_error

__all__ = [
    "BACKLOG",
    "IDENTITY",
    "LEVELS",
    "MAX_PAGES",
    "PAGE",
    "Backlog",
    "identify",
    "json_line",
    "mask_url",
    "provider_sdk_logs",
    "redact",
    "setup_logging",
    "store_error",
]
