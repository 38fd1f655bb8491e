"""Store backends, chosen by URL scheme among the `effectgate.stores` entry points (registry.py)."""

from __future__ import annotations

from effectgate.gateway.store.accounting import beyond, denial
from effectgate.gateway.store.base import Store, Usage
from effectgate.gateway.store.clock import StoreClock, skew_problem
from effectgate.gateway.store.faults import (
    SchemaBehind,
    StoreDataRefused,
    StoreError,
    StoreRefused,
    StoreTextRefused,
    StoreUnavailable,
)
from effectgate.gateway.store.registry import open_store, redact_url
from effectgate.gateway.store.rows import decode_cursor, encode_cursor
from effectgate.gateway.store.trail.check import Verdict
from effectgate.gateway.store.trail.check import verify as verify_chain
from effectgate.gateway.store.trail.stored import StoredRow

__all__ = [
    "SchemaBehind",
    "Store",
    "StoreClock",
    "StoreDataRefused",
    "StoreError",
    "StoreRefused",
    "StoreTextRefused",
    "StoreUnavailable",
    "StoredRow",
    "Usage",
    "Verdict",
    "beyond",
    "decode_cursor",
    "denial",
    "encode_cursor",
    "open_store",
    "redact_url",
    "skew_problem",
    "verify_chain",
]
