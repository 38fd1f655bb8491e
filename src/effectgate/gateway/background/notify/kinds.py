"""The sinks of `[[notify]]` by kind: each kind's module is imported when a sink of that kind is built."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from effectgate.adapters.base import ConfigError
from effectgate.gateway.background.notify.sinks import Sink
from effectgate.gateway.config import NotifySink


def _webhook() -> type[Sink]:
    from effectgate.gateway.background.notify.webhook import WebhookSink

    return WebhookSink


def _slack() -> type[Sink]:
    from effectgate.gateway.background.notify.slack import SlackSink

    return SlackSink


def _email() -> type[Sink]:
    from effectgate.gateway.background.notify.email import EmailSink

    return EmailSink


# A kind's module (httpx for webhook and slack, an SMTP client for email) loads only when a sink
# of that kind is configured: most gateways have no [[notify]] at all.
KINDS: dict[str, Callable[[], type[Sink]]] = {"webhook": _webhook, "slack": _slack, "email": _email}


def build_sinks(configs: Sequence[NotifySink], source: str = "effectgate.toml") -> dict[str, Sink]:
    """The sinks of the config, their secrets read now; a ConfigError names the sink and key."""
    sinks: dict[str, Sink] = {}
    for index, config in enumerate(configs, 1):
        kind = KINDS[config.kind]()
        try:
            sinks[config.name] = kind(config)
        except ConfigError as exc:
            raise ConfigError(f"{source}: [[notify]] #{index} ({config.name}) {exc}") from None
    return sinks
