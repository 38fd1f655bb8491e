"""`send_email` over SMTP (aiosmtplib), optionally verified through an IMAP mailbox.

SMTP has no idempotency key and no read API. The adapter gives each message a Message-ID derived
from the action, drives the SMTP transaction step by step so it knows *where* a failure happened
(before DATA nothing was handed over; during DATA the server may have queued the message), and,
when an IMAP mailbox that receives the messages is configured (the recipient's, or an archive
added with `archive_rcpt`), verifies by searching that mailbox for the Message-ID. Without a
mailbox, verification answers UNKNOWN ("no read API"): it never guesses.
"""

from __future__ import annotations

import contextlib
import imaplib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from email.utils import formatdate
from typing import Any

import aiosmtplib
from pydantic import Field

from effectgate.adapters import email_common
from effectgate.adapters.base import (
    ActionCall,
    AmbiguousError,
    Capabilities,
    CredentialsRefused,
    DefinitiveError,
    NoEffectError,
    Observation,
    Outcome,
    Receipt,
)
from effectgate.adapters.redact import scrub
from effectgate.adapters.secrets import resolved_secrets
from effectgate.adapters.settings import AdapterSettings, parse_settings
from effectgate.adapters.smtp.imap_lookup import ImapSettings, find_by_message_id

# How long a server may still accept a message after its DATA ended (RFC 5321's DATA timeout).
SMTP_KEEPS_PROCESSING = 600.0


class SmtpSettings(AdapterSettings):
    host: str = Field(min_length=1)
    port: int = Field(default=25, gt=0, lt=65536)
    username_env: str | None = None
    username_file: str | None = None
    password_env: str | None = None
    password_file: str | None = None
    starttls: bool = False
    timeout: float = Field(default=30.0, gt=0)
    default_from: str = ""
    message_id_domain: str = email_common.DEFAULT_DOMAIN
    archive_rcpt: str = ""
    consistency_window: float = Field(default=60.0, ge=0)
    # The read API: an IMAP mailbox that receives the messages (optional).
    imap_host: str = ""
    imap_port: int | None = Field(default=None, gt=0, lt=65536)
    imap_user: str = ""
    imap_password_env: str | None = None
    imap_password_file: str | None = None
    imap_mailbox: str = "INBOX"
    imap_ssl: bool = False


class SmtpAdapter(email_common.EmailAdapter):
    def __init__(
        self,
        name: str,
        *,
        host: str,
        port: int = 25,
        username: str = "",
        password: str = "",
        starttls: bool = False,
        timeout: float = 30.0,
        default_from: str = "",
        message_id_domain: str = email_common.DEFAULT_DOMAIN,
        archive_rcpt: str = "",
        consistency_window: float = 60.0,
        imap: ImapSettings | None = None,
    ) -> None:
        self.name = name
        self._host, self._port = host, port
        self._username, self._password = username, password
        self._starttls, self._timeout = starttls, timeout
        self._default_from = default_from
        self._domain = message_id_domain
        self._archive_rcpt = archive_rcpt
        self._imap = imap
        self._own_secrets = frozenset(s for s in (password, imap.password if imap else "") if s)
        self._capabilities = Capabilities(
            dedups_on_key=False,
            key_retention=None,
            consistency_window=consistency_window,
            has_read_api=imap is not None,
            # RFC 5321 4.5.3.2.6: a client waits up to 10 minutes for the reply to the end of
            # DATA, so a server may still accept (and deliver) a message that long after it.
            keeps_processing=SMTP_KEEPS_PROCESSING,
        )

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> SmtpAdapter:
        parsed = parse_settings(SmtpSettings, settings)
        imap = None
        if parsed.imap_host:
            imap = ImapSettings(
                host=parsed.imap_host,
                port=parsed.imap_port or (993 if parsed.imap_ssl else 143),
                user=parsed.imap_user,
                password=parsed.secret("imap_password"),
                mailbox=parsed.imap_mailbox,
                ssl=parsed.imap_ssl,
                timeout=parsed.timeout,
            )
        return cls(
            name,
            host=parsed.host,
            port=parsed.port,
            username=parsed.secret("username", required=False, register=False),
            password=parsed.secret("password", required=False),
            starttls=parsed.starttls,
            timeout=parsed.timeout,
            default_from=parsed.default_from,
            message_id_domain=parsed.message_id_domain,
            archive_rcpt=parsed.archive_rcpt,
            consistency_window=parsed.consistency_window,
            imap=imap,
        )

    def _secrets(self) -> frozenset[str]:
        return resolved_secrets() | self._own_secrets

    def _message(self, call: ActionCall, email: email_common.Email) -> tuple[str, bytes]:
        msg = EmailMessage()
        mid = email_common.message_id(call, self._domain)
        msg["Message-ID"] = mid
        msg["From"] = email.sender
        msg["To"] = email.to
        msg["Subject"] = email.subject
        msg["Date"] = formatdate(usegmt=True)
        msg["X-Effectgate-Action-Id"] = call.action_id
        msg.set_content(email.text)
        return mid, msg.as_bytes(policy=SMTP_POLICY)

    async def execute(self, call: ActionCall) -> Receipt:
        email = self._email(call)
        mid, raw = self._message(call, email)
        rcpts = [email.to] + ([self._archive_rcpt] if self._archive_rcpt else [])
        async with self._session() as session:
            session.phase = "mail"
            await session.client.mail(email.sender)
            session.phase = "rcpt"
            for rcpt in rcpts:
                await session.client.rcpt(rcpt)
            session.phase = "data"
            reply = await session.client.data(raw)
        return Receipt(
            external_id=mid,
            provider_request_id=scrub(reply.message, self._secrets(), 200),
            result={"message_id": mid, "smtp_code": reply.code, "recipients": len(rcpts)},
        )

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[_Session]:
        """A connected (and logged-in) SMTP client; a failure anywhere in the block, its own
        phases included, is classified by the phase it happened in, and the client is closed."""
        session = _Session(
            aiosmtplib.SMTP(hostname=self._host, port=self._port, timeout=self._timeout, start_tls=self._starttls)
        )
        try:
            await session.client.connect()
            if self._username:
                session.phase = "login"
                await session.client.login(self._username, self._password)
            yield session
        except aiosmtplib.SMTPResponseException as exc:
            raise self._classify_reply(session.phase, exc.code, exc.message) from None
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            raise self._classify_broken(session.phase, exc) from None
        finally:
            await _close(session.client)

    def _classify_reply(self, phase: str, code: int, text: str) -> Exception:
        # SMTP replies are explicit: 5xx is a permanent refusal, 4xx a temporary one, and both
        # mean the server did not take the message (an answered DATA is either queued or not).
        what = f"SMTP {phase} refused: {code} {scrub(text, self._secrets())}"
        if phase == "login":
            return CredentialsRefused(what, code=f"smtp_{code}")
        if phase == "connect":
            # A refused greeting or our own credentials: a server problem, not the payload's.
            return NoEffectError(what, code=f"smtp_{code}")
        if 500 <= code < 600:
            return DefinitiveError(what, code=f"smtp_{code}")
        return NoEffectError(what, code=f"smtp_{code}")

    def _classify_broken(self, phase: str, exc: BaseException) -> Exception:
        what = f"SMTP connection failed during {phase}: {type(exc).__name__}"
        if phase == "data":
            # The server may have queued the message before the reply got lost.
            return AmbiguousError(what, code="smtp_lost_reply")
        return NoEffectError(what, code="smtp_unavailable")

    async def probe(self) -> str:
        """`check --probe`: connects, says EHLO (and STARTTLS), logs in if configured; sends nothing."""
        async with self._session():
            pass
        return "EHLO and login accepted" if self._username else "EHLO accepted"

    async def verify(self, call: ActionCall) -> Observation:
        if self._imap is None:
            return Observation.unknown("no read API: SMTP without an IMAP mailbox cannot prove delivery")
        email = self._email(call)
        mid = email_common.message_id(call, self._domain)
        try:
            found = await find_by_message_id(self._imap, mid)
        except (imaplib.IMAP4.error, OSError, TimeoutError) as exc:
            detail = f"IMAP search failed: {type(exc).__name__}: {scrub(str(exc), self._secrets())}"
            return Observation.unknown(detail, message_id=mid)
        if not found:
            return Observation(
                Outcome.NOT_FOUND,
                detail=f"no message {mid} in {self._imap.mailbox}",
                evidence={"message_id": mid, "mailbox": self._imap.mailbox},
            )
        for msg in found:
            wrong = email_common.mismatches(email, {"to": msg.to, "subject": msg.subject})
            if not wrong:
                evidence = {"message_id": mid, "mailbox": self._imap.mailbox, "copies": len(found)}
                return Observation(
                    Outcome.CONFIRMED,
                    detail=f"message {mid} found in {self._imap.mailbox}",
                    evidence=evidence,
                    receipt=Receipt(external_id=mid, result=evidence),
                )
        # The message arrived but not as sent (rewritten, truncated): not the whole effect.
        return Observation.unknown(
            f"message {mid} found but differs from the payload in: {', '.join(wrong)}",
            message_id=mid,
            copies=len(found),
        )


@dataclass
class _Session:
    client: aiosmtplib.SMTP
    phase: str = "connect"  # what the client is doing: a failure is classified by it


async def _close(client: aiosmtplib.SMTP) -> None:
    if not client.is_connected:
        return
    try:
        await client.quit()
    except (aiosmtplib.SMTPException, OSError, TimeoutError):
        client.close()
