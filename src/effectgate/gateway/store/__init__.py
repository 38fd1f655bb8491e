"""Store backends, chosen by URL scheme."""

from __future__ import annotations

from effectgate.gateway.store.base import Store, StoreError, StoreUnavailable
from effectgate.gateway.store.urls import redact_url

__all__ = ["Store", "StoreError", "StoreUnavailable", "open_store", "redact_url"]


def open_store(url: str) -> Store:
    """Builds (does not open) the store for `url`: `sqlite:///…` or `postgresql://…`."""
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from effectgate.gateway.store.sqlite import SqliteStore

        return SqliteStore.from_url(url)
    if scheme in ("postgresql", "postgres"):
        from effectgate.gateway.store.postgres import PostgresStore

        return PostgresStore.from_url(url)
    raise ValueError(f"unsupported store URL scheme {scheme!r}: use sqlite:/// or postgresql://")
