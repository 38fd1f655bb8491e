"""Read-only IMAP lookup of messages by Message-ID: the SMTP adapter's read API.

The stdlib `imaplib` is blocking, so each lookup runs in a worker thread with its own short-lived
connection; verification is rare (only after an ambiguous send), so pooling would buy nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import imaplib
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from email.policy import default as default_policy
from email.utils import getaddresses


@dataclass(frozen=True)
class ImapSettings:
    host: str
    port: int
    user: str
    password: str
    mailbox: str = "INBOX"
    ssl: bool = False
    timeout: float = 10.0


@dataclass(frozen=True)
class FoundMessage:
    message_id: str
    to: str
    subject: str


async def find_by_message_id(settings: ImapSettings, message_id: str) -> list[FoundMessage]:
    """Every message of the mailbox whose Message-ID header is exactly `message_id`.

    Raises `imaplib.IMAP4.error` or `OSError` when the mailbox cannot be searched.
    """
    return await asyncio.to_thread(_find, settings, message_id)


def _connect(s: ImapSettings) -> imaplib.IMAP4:
    if s.ssl:
        return imaplib.IMAP4_SSL(s.host, s.port, timeout=s.timeout)
    return imaplib.IMAP4(s.host, s.port, timeout=s.timeout)


def _find(s: ImapSettings, message_id: str) -> list[FoundMessage]:
    conn = _connect(s)
    try:
        conn.login(s.user, s.password)
        typ, data = conn.select(_quote(s.mailbox), readonly=True)
        if typ != "OK":
            raise imaplib.IMAP4.error(f"cannot select mailbox {s.mailbox!r}")
        # HEADER search is a substring match; the exact comparison below makes it exact.
        typ, data = conn.search(None, "HEADER", "Message-ID", _quote(message_id))
        if typ != "OK":
            raise imaplib.IMAP4.error("SEARCH failed")
        found = []
        for num in (data[0] or b"").split():
            msg = _headers(conn, num)
            if msg is not None and msg.message_id == message_id:
                found.append(msg)
        return found
    finally:
        with contextlib.suppress(imaplib.IMAP4.error, OSError):
            conn.logout()


def _headers(conn: imaplib.IMAP4, num: bytes) -> FoundMessage | None:
    typ, data = conn.fetch(num.decode(), "(BODY.PEEK[HEADER.FIELDS (TO SUBJECT MESSAGE-ID)])")
    if typ != "OK":
        raise imaplib.IMAP4.error("FETCH failed")
    raw = next((part[1] for part in data if isinstance(part, tuple)), None)
    if raw is None:
        return None
    headers = BytesHeaderParser(policy=default_policy).parsebytes(raw)
    addresses = [addr for _, addr in getaddresses([str(headers.get("To", ""))])]
    return FoundMessage(
        message_id=str(headers.get("Message-ID", "")).strip(),
        to=",".join(addresses),
        subject=str(headers.get("Subject", "")),
    )


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
