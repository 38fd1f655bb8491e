"""Signed webhooks for the generic HTTP adapter: the `[adapters.NAME.webhook]` table.

The provider signs each delivery with an HMAC-SHA256 of the body (`signed = "body"`) or of
`"<timestamp>.<body>"` (`signed = "timestamp.body"`, with the timestamp in `timestamp_header`,
refused outside `tolerance` seconds), sent in `header` as `<scheme><hex digest>` (e.g.
`X-Signature: sha256=…`). The secret (`secret_env` / `secret_file`) may hold several, comma
separated, during a rotation. JSON paths name the event's id, its type, the action id the
adapter's request carried (`action_id`, e.g. `data.reference` for a body template holding
`"{action_id}"`) and the object the `expect` postconditions read (`object`); `kinds` maps
event types to what they mean (`succeeded`, `failed`, `canceled`, `refunded`, `disputed`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from effectgate.adapters.capabilities import EventKind, ProviderEvent, WebhookRejected
from effectgate.adapters.http import template as tpl
from effectgate.adapters.http.template import Postcondition
from effectgate.adapters.settings import AdapterSettings

_SAFE = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")


class WebhookSpec(AdapterSettings):
    secret_env: str | None = None
    secret_file: str | None = None
    header: str = "X-Signature"
    scheme: str = "sha256="
    signed: str = Field(default="timestamp.body", pattern=r"^(body|timestamp\.body)$")
    timestamp_header: str = "X-Signature-Timestamp"
    tolerance: float = Field(default=300.0, gt=0)
    event_id: str = "id"
    event_type: str = "type"
    action_id: str = "data.action_id"
    object: str = "data"
    kinds: dict[str, EventKind] = Field(default_factory=dict)
    # What a settling event's object must show to confirm the action (payload values in braces).
    expect: list[Postcondition] = Field(default_factory=list)


def _safe(value: object) -> str:
    text = "" if value in (None, tpl.MISSING) else str(value)
    return text if _SAFE.fullmatch(text) else ""


def verify(spec: WebhookSpec, secrets: list[str], body: bytes, headers: Mapping[str, str]) -> ProviderEvent:
    given = headers.get(spec.header.lower(), "")
    if not given.startswith(spec.scheme) or not secrets:
        raise WebhookRejected("forged", f"no {spec.header} signature")
    signed = body
    if spec.signed == "timestamp.body":
        stamp = headers.get(spec.timestamp_header.lower(), "")
        if not stamp.isdigit():
            raise WebhookRejected("forged", f"no {spec.timestamp_header}")
        signed = stamp.encode() + b"." + body
    digest = given[len(spec.scheme) :]
    if not any(hmac.compare_digest(hmac.new(s.encode(), signed, hashlib.sha256).hexdigest(), digest) for s in secrets):
        raise WebhookRejected("forged", "no configured secret signed this payload")
    if spec.signed == "timestamp.body" and abs(time.time() - int(stamp)) > spec.tolerance:
        raise WebhookRejected("stale", "signed outside the tolerance window")
    try:
        event: Any = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise WebhookRejected("malformed", "the signed payload is not JSON") from None
    event_id, kind_name = _safe(tpl.lookup(event, spec.event_id)), str(tpl.lookup(event, spec.event_type))
    if not event_id:
        raise WebhookRejected("malformed", f"no event id at {spec.event_id!r}")
    obj = tpl.lookup(event, spec.object)
    return ProviderEvent(
        event_id=event_id,
        kind=spec.kinds.get(kind_name, EventKind.OTHER),
        type=_safe(kind_name),
        action_id=_safe(tpl.lookup(event, spec.action_id)),
        object_id=_safe(tpl.lookup(obj, "id")) if isinstance(obj, dict) else "",
        raw=obj if isinstance(obj, dict) else {},
    )
