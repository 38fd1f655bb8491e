"""The sink interface: one module per kind (webhook, slack, email), built from `[[notify]]`.

A sink sends one notification and returns, or raises `DeliveryFailed` with a short reason (the
deliverer retries it with back-off). It must keep to its `timeout`, so that a sink that is down
costs the deliverer a bounded wait and nothing else: it runs in the background job, never on the
path of an RPC.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from effectgate.adapters.base import ConfigError
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


def build_sinks(configs: Sequence[NotifySink], source: str = "effectgate.toml") -> dict[str, Sink]:
    """The sinks of the config, their secrets read now; a ConfigError names the sink and key."""
    from effectgate.gateway.background.notify.email import EmailSink
    from effectgate.gateway.background.notify.slack import SlackSink
    from effectgate.gateway.background.notify.webhook import WebhookSink

    kinds: dict[str, type[Sink]] = {"webhook": WebhookSink, "slack": SlackSink, "email": EmailSink}
    sinks: dict[str, Sink] = {}
    for index, config in enumerate(configs, 1):
        try:
            sinks[config.name] = kinds[config.kind](config)
        except ConfigError as exc:
            raise ConfigError(f"{source}: [[notify]] #{index} ({config.name}) {exc}") from None
    return sinks


def secret(config: NotifySink, key: str, *, required: bool = True) -> str:
    """The secret `<key>_env` / `<key>_file` of a sink names (registered for log scrubbing)."""
    from effectgate.adapters.secrets import read_secret

    return read_secret(config.model_dump(include={f"{key}_env", f"{key}_file"}), key, required=required)
