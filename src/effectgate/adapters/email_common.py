"""What the two `send_email` adapters (Postmark-style API, SMTP) share.

Neither provider deduplicates on a key, so a message is tied to its action by what it carries:
a Message-ID derived from the action, which verification searches for and then compares with the
payload field by field.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from google.protobuf.message import Message

from effectgate.adapters.base import ActionCall, Adapter, Capabilities, DefinitiveError, InvalidPayload
from effectgate.tools.v1 import tools_pb2

DEFAULT_DOMAIN = "effectgate"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def message_id(call: ActionCall, domain: str = DEFAULT_DOMAIN) -> str:
    """`<ACTION_ID.KEYHASH@domain>`: the action id for operators to grep, plus a hash of the
    provider key so that an operator-granted new generation (new key) is a different message
    that an older one cannot confirm."""
    key_hash = hashlib.sha256(call.provider_key.encode()).hexdigest()[:16]
    return f"<{_UNSAFE.sub('_', call.action_id)}.{key_hash}@{domain}>"


@dataclass(frozen=True)
class Email:
    sender: str
    to: str
    subject: str
    text: str


def normalize(payload: tools_pb2.SendEmail) -> tools_pb2.SendEmail:
    """Trims the addresses and subject and unifies line endings, so paraphrase-free repeats of
    one message fingerprint alike."""
    out = tools_pb2.SendEmail()
    out.CopyFrom(payload)
    out.to = payload.to.strip()
    setattr(out, "from", getattr(payload, "from").strip())  # `from` is a Python keyword
    out.subject = " ".join(payload.subject.split())
    out.text = payload.text.replace("\r\n", "\n")
    return out


def email_of(payload: tools_pb2.SendEmail, default_from: str) -> Email:
    sender = getattr(payload, "from") or default_from
    return Email(sender=sender, to=payload.to, subject=payload.subject, text=payload.text)


def invalid_field(email: Email) -> tuple[str, str] | None:
    """(field, why) when the message cannot be sent at all, else None."""
    for name, value in (("to", email.to), ("from", email.sender)):
        if not value:
            return name, f"{name} is empty"
        if "@" not in value or any(c in value for c in "\r\n,;<> "):
            return name, f"{name} is not a single plain address"
    if any(c in email.subject for c in "\r\n"):
        return "subject", "subject holds a line break"
    return None


def mismatches(expected: Email, found: Mapping[str, str]) -> list[str]:
    """The fields of a found message that differ from the intended one (to, subject)."""
    wrong = []
    if found.get("to", "").strip().lower() != expected.to.lower():
        wrong.append("to")
    if " ".join(found.get("subject", "").split()) != expected.subject:
        wrong.append("subject")
    return wrong


class EmailAdapter(Adapter):
    """What every `send_email` adapter shares: the payload type, normalisation and validation.
    Subclasses set `_default_from` and `_capabilities` in their constructor."""

    payload_type = tools_pb2.SendEmail
    _default_from: str
    _capabilities: Capabilities

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def normalize(self, payload: Message) -> Message:
        assert isinstance(payload, tools_pb2.SendEmail)
        out = normalize(payload)
        bad = invalid_field(email_of(out, self._default_from))
        if bad:
            raise InvalidPayload(*bad)
        return out

    def _email(self, call: ActionCall) -> Email:
        assert isinstance(call.payload, tools_pb2.SendEmail)
        email = email_of(call.payload, self._default_from)
        bad = invalid_field(email)
        if bad:  # normalize should have caught it; nothing is sent either way
            raise DefinitiveError(f"send_email: {bad[1]}", code="invalid_payload")
        return email
