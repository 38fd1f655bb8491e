"""Store backends, chosen by URL scheme among the `effectgate.stores` entry points (registry.py)."""

from __future__ import annotations

from effectgate.gateway.store.accounting import denial
from effectgate.gateway.store.base import SchemaBehind, Store, StoreError, StoreRefused, StoreUnavailable, Usage
from effectgate.gateway.store.clock import StoreClock, skew_problem
from effectgate.gateway.store.registry import open_store
from effectgate.gateway.store.rows import decode_cursor, encode_cursor
from effectgate.gateway.store.urls import redact_url

__all__ = [
    "SchemaBehind",
    "Store",
    "StoreClock",
    "StoreError",
    "StoreRefused",
    "StoreUnavailable",
    "Usage",
    "decode_cursor",
    "denial",
    "encode_cursor",
    "open_store",
    "redact_url",
    "skew_problem",
]
