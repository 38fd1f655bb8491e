"""Email over SMTP (aiosmtplib, the `smtp` extra), with the SMTP adapter's keys (`host`, `port`,
`username_env`/`_file`, `password_env`/`_file`, `starttls`) and the letter's `from_address` and
`to`. The Message-ID is made of the event id, so a receiver (or a mail filter) can drop a
redelivered copy. A 2xx to DATA is taken; anything else is retried."""

from __future__ import annotations

from collections.abc import Mapping
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

from effectgate.adapters.base import ConfigError
from effectgate.gateway.background.notify import message
from effectgate.gateway.background.notify.sinks import DeliveryFailed, Sink, secret
from effectgate.gateway.config import NotifySink

MESSAGE_ID_DOMAIN = "notify.effectgate.invalid"


def letter(config: NotifySink, event_id: str, note: Mapping[str, Any]) -> EmailMessage:
    msg = EmailMessage()
    msg["Message-ID"] = f"<{event_id}@{MESSAGE_ID_DOMAIN}>"
    msg["Date"] = formatdate(localtime=False)
    msg["From"] = config.from_address
    msg["To"] = ", ".join(config.to)
    msg["Subject"] = "[effectgate] " + message.summary(note)
    msg.set_content("\n".join(message.lines(note)) + "\n")
    return msg


class EmailSink(Sink):
    def __init__(self, config: NotifySink) -> None:
        super().__init__(config)
        try:
            import aiosmtplib  # noqa: F401  (the `smtp` extra)
        except ImportError:
            raise ConfigError(
                "kind = 'email' needs the smtp extra: pip install 'effectgate[smtp]'", key="kind"
            ) from None
        self._username = secret(config, "username", required=False)
        self._password = secret(config, "password", required=False)

    async def send(self, event_id: str, note: Mapping[str, Any], body: str) -> None:
        import aiosmtplib

        c = self.config
        try:
            await aiosmtplib.send(
                letter(c, event_id, note),
                hostname=c.host,
                port=c.port,
                username=self._username or None,
                password=self._password or None,
                start_tls=c.starttls,
                timeout=c.timeout,
            )
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            raise DeliveryFailed(f"{type(exc).__name__}: {exc}"[:300]) from None
