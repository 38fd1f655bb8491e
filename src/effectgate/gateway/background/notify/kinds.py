"""The sinks of `[[notify]]` by kind: each kind's module is imported when the config is built."""

from __future__ import annotations

from collections.abc import Sequence

from effectgate.adapters.base import ConfigError
from effectgate.gateway.background.notify.sinks import Sink
from effectgate.gateway.config import NotifySink


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
