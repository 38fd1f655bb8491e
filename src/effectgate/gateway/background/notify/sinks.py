"""The sink interface: one module per kind (webhook, slack, email), built from `[[notify]]` by
kinds.py.

A sink sends one notification and returns, or raises `DeliveryFailed` with a short reason (the
deliverer retries it with back-off). It must keep to its `timeout`, so that a sink that is down
costs the deliverer a bounded wait and nothing else: it runs in the background job, never on the
path of an RPC.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from effectgate.gateway.config import NotifySink


class DeliveryFailed(Exception):
    """The sink did not take the notification (it may be retried)."""


class Sink(ABC):
    def __init__(self, config: NotifySink) -> None:
        self.config = config

    @property
    def name(self) -> str:
        return self.config.name

    @abstractmethod
    async def send(self, event_id: str, note: Mapping[str, Any], body: str) -> None:
        """Delivers `note` (whose JSON text is `body`), deduplicable by `event_id`."""

    async def close(self) -> None:
        return None


def secret(config: NotifySink, key: str, *, required: bool = True) -> str:
    """The secret `<key>_env` / `<key>_file` of a sink names (registered for log scrubbing)."""
    from effectgate.adapters.secrets import read_secret

    return read_secret(config.model_dump(include={f"{key}_env", f"{key}_file"}), key, required=required)
