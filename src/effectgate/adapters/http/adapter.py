"""A generic HTTP adapter configured entirely in the config file (payload: google.protobuf.Struct).

One `[adapters.NAME]` table with `kind = "http"` describes one write and how to prove it:

    request  = { method = "POST", url = "/invoices", body = { id = "{id}", amount = "{amount}" } }
    verify   = { method = "GET", url = "/invoices?id={id}" }
    expect   = [ { path = "data", one = [ { path = "amount", equals = "{amount}" } ] } ]
    absent_when = [ { path = "data", count = 0 } ]

See `http_template` for the template and postcondition language and `http_settings` for every
key. `verify` answers CONFIRMED only when every `expect` holds; NOT_FOUND only on a proof of
absence the table states (a status in `absent_statuses`, or every `absent_when` condition
holding); anything else (a half-applied resource, an error, a 404 nobody declared as absence) is
UNKNOWN. Without `verify` the adapter has no read API and always answers UNKNOWN.

Everything a provider sends back (bodies, headers) is scrubbed of every configured secret before
it is compared, stored or echoed; URLs, which carry payload values, are never put in messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import httpx
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from effectgate.adapters.base import (
    ActionCall,
    Adapter,
    AdapterError,
    AmbiguousError,
    Capabilities,
    ConfigError,
    CredentialsRefused,
    DefinitiveError,
    InvalidPayload,
    Observation,
    Outcome,
    Receipt,
)
from effectgate.adapters.capabilities import EventKind, ProviderEvent, WebhookRejected
from effectgate.adapters.http import probe, webhooks
from effectgate.adapters.http import template as tpl
from effectgate.adapters.http.settings import HttpSettings, RequestSpec
from effectgate.adapters.http_outcome import status_error, transport_error
from effectgate.adapters.redact import scrub, scrub_json
from effectgate.adapters.secrets import quiet_transport_loggers, resolved_secrets
from effectgate.adapters.settings import parse_settings


class HttpAdapter(Adapter):
    payload_type = struct_pb2.Struct

    def __init__(self, name: str, settings: HttpSettings) -> None:
        self.name = name
        self._s = settings
        self._request = settings.request
        self._verify = settings.verify
        self._absent_statuses = frozenset(settings.absent_statuses)
        self._definitive = frozenset(settings.definitive_statuses)
        self._fields = settings.payload_fields()
        self._path_fields = settings.path_fields()
        self._token = settings.secret("token", required=False)
        hook = settings.webhook
        try:
            self._webhook_secret = hook.secret("secret", required=False) if hook is not None else ""
        except ConfigError as exc:
            exc.key = f"webhook.{exc.key}" if exc.key else "webhook"
            raise
        headers = dict(settings.headers)
        headers.setdefault("Accept", "application/json")
        if self._token:
            scheme = settings.auth_scheme
            headers[settings.auth_header] = f"{scheme} {self._token}" if scheme else self._token
        dedups = settings.dedups_on_key
        self._capabilities = Capabilities(
            dedups_on_key=dedups,
            key_retention=settings.key_retention if dedups else None,
            consistency_window=settings.consistency_window,
            has_read_api=self._verify is not None,
            keeps_processing=settings.keeps_processing,
        )
        quiet_transport_loggers()
        self._client = httpx.AsyncClient(base_url=settings.base_url, timeout=settings.timeout, headers=headers)

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> HttpAdapter:
        return cls(name, parse_settings(HttpSettings, settings))

    def __repr__(self) -> str:
        return f"HttpAdapter(name={self.name!r}, request={self._request.method} {self._request.url!r})"

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def normalize(self, payload: Message) -> Message:
        assert isinstance(payload, struct_pb2.Struct)
        for field in sorted(self._fields):
            if field not in payload.fields:
                raise InvalidPayload(field, f"{self.name}: the payload has no field {field!r}")
        values = json_format.MessageToDict(payload)
        for field in sorted(self._path_fields & set(values)):
            try:
                tpl.fill(f"{{{field}}}", values, url=True)
            except tpl.UnsafeValue as exc:
                raise InvalidPayload(field, f"{self.name}: {exc}") from None
        return payload

    def _values(self, call: ActionCall) -> dict[str, Any]:
        assert isinstance(call.payload, struct_pb2.Struct)
        values: dict[str, Any] = json_format.MessageToDict(call.payload)
        missing = self._fields - set(values)
        if missing:
            raise DefinitiveError(f"{self.name}: the payload lacks {sorted(missing)}", code="invalid_payload")
        values.update(
            action_id=call.action_id,
            provider_key=call.provider_key,
            scope=call.scope,
            tool=call.tool,
            tenant=call.tenant,
        )
        return values

    def _build(self, template: RequestSpec, values: Mapping[str, Any], key: str = "") -> httpx.Request:
        """The request; raises `tpl.UnsafeValue` before anything is sent for a path-changing value."""
        headers = {self._s.idempotency_header: key} if key and self._s.idempotency_header else {}
        body = None if template.body is None else json.dumps(tpl.fill_json(template.body, values))
        if body is not None:
            headers["Content-Type"] = "application/json"
        url = tpl.fill(template.url, values, url=True)
        # The template (no payload values) is what tracing records as the URL.
        return self._client.build_request(
            template.method, url, content=body, headers=headers, extensions={"effectgate.url_template": template.url}
        )

    def _clean(self, resp: httpx.Response) -> Any:
        """The answer as a JSON document (None when it is not JSON), scrubbed of every secret."""
        if resp.request.method == "HEAD":
            doc: Any = {"status": resp.status_code, "headers": {k.lower(): v for k, v in resp.headers.items()}}
        else:
            try:
                doc = resp.json()
            except ValueError:
                doc = None
        return scrub_json(doc, self._secrets())

    def _secrets(self) -> frozenset[str]:
        return resolved_secrets() | {self._token} if self._token else resolved_secrets()

    def _request_id(self, resp: httpx.Response) -> str:
        raw = resp.headers.get("Request-Id", resp.headers.get("X-Request-Id", ""))
        return scrub(raw, self._secrets(), limit=200)

    async def execute(self, call: ActionCall) -> Receipt:
        values = self._values(call)
        what = f"{self.name} {self._request.method}"
        try:
            request = self._build(self._request, values, call.provider_key)
        except tpl.UnsafeValue as exc:
            raise DefinitiveError(f"{self.name}: {exc}; nothing was sent", code="invalid_payload") from None
        try:
            resp = await self._client.send(request)
        except httpx.HTTPError as exc:
            raise transport_error(exc, what) from None
        if not resp.is_success:
            raise status_error(
                resp.status_code,
                resp.text,
                what,
                definitive=self._definitive,
                secrets=self._secrets(),
                headers=resp.headers,
            )
        doc = self._clean(resp)
        wrong = tpl.failures(self._s.response_expect, doc, values)
        if wrong:
            # The provider says OK but shows a half-applied effect: not a success to record.
            raise AmbiguousError(f"{what}: answered {resp.status_code} but {'; '.join(wrong)}", code="partial")
        external = tpl.lookup(doc, self._s.receipt_id)
        return Receipt(
            external_id=str(external) if external not in (tpl.MISSING, None) else call.action_id,
            provider_request_id=self._request_id(resp),
            result=doc if isinstance(doc, dict) else {"status": resp.status_code},
        )

    async def verify(self, call: ActionCall) -> Observation:
        if self._verify is None:
            return Observation.unknown(f"no read API: {self.name} has no `verify` request configured")
        values = self._values(call)
        try:
            request = self._build(self._verify, values)
        except tpl.UnsafeValue as exc:
            return Observation.unknown(f"{self.name}: {exc}")
        try:
            resp = await self._client.send(request)
        except httpx.HTTPError as exc:
            return Observation.unknown(f"{self.name} verify failed: {type(exc).__name__}")
        return self._observed(resp, values, call)

    def _observed(self, resp: httpx.Response, values: Mapping[str, Any], call: ActionCall) -> Observation:
        """What the verify read's answer proves."""
        if resp.status_code in self._absent_statuses:
            return Observation(Outcome.NOT_FOUND, detail=f"verify answered {resp.status_code} (declared absent)")
        if not resp.is_success:
            hint = "" if self._absent_statuses or self._s.absent_when else " (no absence rule is configured)"
            return Observation.unknown(f"{self.name} verify answered HTTP {resp.status_code}{hint}")
        doc = self._clean(resp)
        wrong = tpl.failures(self._s.expect, doc, values)
        if not wrong:
            evidence = doc if isinstance(doc, dict) else {}
            external = tpl.lookup(doc, self._s.read_receipt_id())
            ext = str(external) if external not in (tpl.MISSING, None) else call.action_id
            return Observation(
                Outcome.CONFIRMED,
                detail="every postcondition holds",
                evidence=evidence,
                receipt=Receipt(external_id=ext, provider_request_id=self._request_id(resp), result=evidence),
            )
        if self._s.absent_when and not tpl.failures(self._s.absent_when, doc, values):
            return Observation(Outcome.NOT_FOUND, detail=f"absent: {'; '.join(wrong)}")
        # Something is there but not the whole effect (or absence is not provable).
        return Observation.unknown(f"postconditions fail: {scrub('; '.join(wrong), ())}")

    # -- signed webhooks (adapters/capabilities.ReceivesWebhooks, when `webhook` is configured) --

    async def parse_webhook(self, body: bytes, headers: Mapping[str, str]) -> ProviderEvent:
        spec = self._s.webhook
        if spec is None:
            raise WebhookRejected("forged", f"{self.name} takes no webhooks (no `webhook` table)")
        secrets = [s for s in re.split(r"[\s,]+", self._webhook_secret) if s]
        return webhooks.verify(spec, secrets, body, headers)

    def observe_event(self, event: ProviderEvent, call: ActionCall) -> Observation:
        spec = self._s.webhook
        if spec is None or not event.kind.settles:
            return Observation.unknown("not an outcome event")
        evidence = {"event_id": event.event_id, "event_type": event.type}
        if event.kind is not EventKind.SUCCEEDED:
            return Observation.unknown(f"the provider reported {event.kind.value}", **evidence)
        doc = scrub_json(event.raw, self._secrets())
        wrong = tpl.failures(spec.expect, doc, self._values(call))
        if wrong:
            return Observation.unknown(f"event postconditions fail: {'; '.join(wrong)}", **evidence)
        external = tpl.lookup(doc, self._s.receipt_id)
        ext = str(external) if external not in (tpl.MISSING, None) else call.action_id
        receipt = Receipt(external_id=ext, result=doc if isinstance(doc, dict) else {})
        return Observation(Outcome.CONFIRMED, detail="the provider's signed event", evidence=evidence, receipt=receipt)

    async def probe(self) -> str:
        """`check --probe`: a GET of `probe_path` when one is configured, and the `verify` read of
        an action that never happened (probe.py)."""
        said = [await self._probe_path()]
        if self._verify is not None:
            said.append(await probe.verify_read(self, self._verify))
        return "; ".join(said)

    # What probe.py reads of this adapter.
    @property
    def client(self) -> httpx.AsyncClient:
        return self._client

    @property
    def payload_fields(self) -> set[str]:
        return set(self._fields)

    def values_of(self, call: ActionCall) -> dict[str, Any]:
        return self._values(call)

    def request_of(self, spec: RequestSpec, values: Mapping[str, Any]) -> httpx.Request:
        return self._build(spec, values)

    def observed(self, resp: httpx.Response, values: Mapping[str, Any], call: ActionCall) -> Observation:
        return self._observed(resp, values, call)

    async def _probe_path(self) -> str:
        if not self._s.probe_path:
            # Without a verify read either, nothing at all is checked.
            return "no probe_path configured" + ("" if self._verify is not None else ": nothing checked")
        try:
            resp = await self._client.get(self._s.probe_path)
        except httpx.HTTPError as exc:
            raise AdapterError(f"GET {self._s.probe_path}: no answer ({type(exc).__name__})", code="connect") from None
        if resp.status_code in (401, 403):
            raise CredentialsRefused(f"GET {self._s.probe_path}: refused (HTTP {resp.status_code})")
        if not resp.is_success:
            raise AdapterError(f"GET {self._s.probe_path}: HTTP {resp.status_code}", code=f"http_{resp.status_code}")
        return f"GET {self._s.probe_path}: HTTP {resp.status_code}"

    async def close(self) -> None:
        await self._client.aclose()
