"""`send_email` through a Postmark-style HTTP API (POST /email, search of sent messages).

Postmark has no idempotency key: two identical POSTs send two emails. So the adapter never
retries by itself, classifies failures strictly (only "could not connect" is harmless), and tags
every message with the action (Metadata `effectgate_action_id`, plus a hash of the provider key so
a later operator-granted generation is told apart) and a Message-ID derived from it. `verify`
searches the sent messages by that metadata and confirms only a message that was actually
`Sent` to the payload's recipient with the payload's subject.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import httpx
from pydantic import Field

from effectgate.adapters import email_common
from effectgate.adapters.base import (
    ActionCall,
    AdapterError,
    AmbiguousError,
    Capabilities,
    CredentialsRefused,
    Observation,
    Outcome,
    Receipt,
)
from effectgate.adapters.http_outcome import status_error, transport_error
from effectgate.adapters.redact import scrub, scrub_json
from effectgate.adapters.secrets import quiet_transport_loggers, resolved_secrets
from effectgate.adapters.settings import AdapterSettings, parse_settings

ACTION_KEY = "effectgate_action_id"  # Postmark: metadata keys <= 20 chars, values <= 80
GENERATION_KEY = "effectgate_key"
# Postmark documents 422 as "the request was refused" (invalid address, inactive recipient...).
DEFINITIVE_STATUSES = frozenset({400, 404, 413, 422})


class PostmarkSettings(AdapterSettings):
    base_url: str = "https://api.postmarkapp.com"
    server_token_env: str | None = None
    server_token_file: str | None = None
    default_from: str = ""
    message_stream: str = ""
    timeout: float = Field(default=30.0, gt=0)
    consistency_window: float = Field(default=60.0, ge=0)
    message_id_domain: str = email_common.DEFAULT_DOMAIN


def _action_tag(action_id: str) -> str:
    return action_id if len(action_id) <= 80 else hashlib.sha256(action_id.encode()).hexdigest()


def _key_tag(provider_key: str) -> str:
    return hashlib.sha256(provider_key.encode()).hexdigest()[:32]


class PostmarkAdapter(email_common.EmailAdapter):
    def __init__(
        self,
        name: str,
        *,
        base_url: str,
        server_token: str,
        default_from: str = "",
        message_stream: str = "",
        timeout: float = 30.0,
        consistency_window: float = 60.0,
        message_id_domain: str = email_common.DEFAULT_DOMAIN,
    ) -> None:
        self.name = name
        self._token = server_token
        self._default_from = default_from
        self._stream = message_stream
        self._domain = message_id_domain
        quiet_transport_loggers()
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=timeout,
            headers={"Accept": "application/json", "X-Postmark-Server-Token": server_token},
        )
        self._capabilities = Capabilities(
            dedups_on_key=False,
            key_retention=None,
            consistency_window=consistency_window,
            has_read_api=True,
        )

    def __repr__(self) -> str:
        return f"PostmarkAdapter(name={self.name!r}, base_url={str(self._client.base_url)!r})"

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> PostmarkAdapter:
        parsed = parse_settings(PostmarkSettings, settings)
        return cls(
            name,
            base_url=parsed.base_url,
            server_token=parsed.secret("server_token"),
            default_from=parsed.default_from,
            message_stream=parsed.message_stream,
            timeout=parsed.timeout,
            consistency_window=parsed.consistency_window,
            message_id_domain=parsed.message_id_domain,
        )

    def _secrets(self) -> frozenset[str]:
        return resolved_secrets() | {self._token}

    async def execute(self, call: ActionCall) -> Receipt:
        email = self._email(call)
        body: dict[str, Any] = {
            "From": email.sender,
            "To": email.to,
            "Subject": email.subject,
            "TextBody": email.text,
            "Headers": [{"Name": "Message-ID", "Value": email_common.message_id(call, self._domain)}],
            "Metadata": {
                ACTION_KEY: _action_tag(call.action_id),
                GENERATION_KEY: _key_tag(call.provider_key),
            },
        }
        if self._stream:
            body["MessageStream"] = self._stream
        try:
            resp = await self._client.post("/email", json=body)
        except httpx.HTTPError as exc:
            raise transport_error(exc, "postmark send") from None
        if resp.status_code != 200:
            raise status_error(
                resp.status_code,
                resp.text,
                "postmark send",
                definitive=DEFINITIVE_STATUSES,
                secrets=self._secrets(),
                headers=resp.headers,
            )
        try:
            answer = scrub_json(resp.json(), self._secrets())
            message_id = str(answer["MessageID"])
            error_code = int(answer.get("ErrorCode", 0))
            message = str(answer.get("Message", ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise AmbiguousError("postmark send: unreadable 200 answer", code="bad_answer") from None
        if error_code != 0 or message != "OK":
            # Accepted, but not (yet) sent: only part of the effect; verification decides.
            detail = scrub(message, self._secrets())
            raise AmbiguousError(
                f"postmark send: accepted as {message_id} but not sent ({detail})",
                code="not_sent",
                details={"message_id": message_id},
            )
        return Receipt(external_id=message_id, result={"to": answer.get("To"), "status": "Sent"})

    async def verify(self, call: ActionCall) -> Observation:
        email = self._email(call)
        params = {"count": "50", "offset": "0", f"metadata_{ACTION_KEY}": _action_tag(call.action_id)}
        try:
            resp = await self._client.get("/messages/outbound", params=params)
        except httpx.HTTPError as exc:
            return Observation.unknown(f"postmark search failed: {type(exc).__name__}")
        if resp.status_code != 200:
            return Observation.unknown(f"postmark search answered HTTP {resp.status_code}")
        try:
            messages = list(scrub_json(resp.json(), self._secrets())["Messages"])
        except (ValueError, KeyError, TypeError):
            return Observation.unknown("postmark search: unreadable answer")
        # Only this generation's messages count; an earlier one is another effect.
        ours = [m for m in messages if m.get("Metadata", {}).get(GENERATION_KEY) == _key_tag(call.provider_key)]
        if not ours:
            return Observation(
                Outcome.NOT_FOUND,
                detail="no sent message carries this action's metadata",
                evidence={ACTION_KEY: _action_tag(call.action_id), "searched": len(messages)},
            )
        for msg in ours:
            to = ",".join(str(r.get("Email", "")) for r in msg.get("To", []))
            whole = msg.get("Status") == "Sent" and not email_common.mismatches(
                email, {"to": to, "subject": str(msg.get("Subject", ""))}
            )
            if whole:
                evidence = {"message_id": msg.get("MessageID"), "status": "Sent", "copies": len(ours)}
                return Observation(
                    Outcome.CONFIRMED,
                    detail=f"message {msg.get('MessageID')} was sent",
                    evidence=evidence,
                    receipt=Receipt(external_id=str(msg.get("MessageID")), result=evidence),
                )
        states = sorted({str(m.get("Status")) for m in ours})
        return Observation.unknown(
            "a message of this action exists but is not sent as requested "
            f"(status {', '.join(states)}, or recipient/subject differ)",
            message_ids=[m.get("MessageID") for m in ours],
        )

    async def probe(self) -> str:
        """`check --probe`: searches one outbound message (a read the server token may do)."""
        try:
            resp = await self._client.get("/messages/outbound", params={"count": "1", "offset": "0"})
        except httpx.HTTPError as exc:
            raise transport_error(exc, "postmark search") from None
        if resp.status_code in (401, 403):
            raise CredentialsRefused(f"postmark search: refused (HTTP {resp.status_code})")
        if resp.status_code != 200:
            raise AdapterError(f"postmark search: HTTP {resp.status_code}", code=f"http_{resp.status_code}")
        return "searched outbound messages"

    async def close(self) -> None:
        await self._client.aclose()
