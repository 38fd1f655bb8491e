"""A generic HTTP adapter configured entirely in the config file (payload: google.protobuf.Struct).

One `[adapters.NAME]` table with `kind = "http"` describes one write and how to prove it:

    request  = { method = "POST", url = "/invoices", body = { id = "{id}", amount = "{amount}" } }
    verify   = { method = "GET", url = "/invoices/{id}" }
    expect   = [ { path = "id", equals = "{id}" }, { path = "amount", equals = "{amount}" } ]

See `http_template` for the template and postcondition language. `verify` answers CONFIRMED only
when every `expect` holds; NOT_FOUND only on proof of absence (a status in `absent_statuses`, or
every `absent_when` condition holding); anything else (a half-applied resource, an error) is
UNKNOWN. Without `verify` the adapter has no read API and always answers UNKNOWN.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from effectgate.adapters import http_template as tpl
from effectgate.adapters.base import (
    ActionCall,
    Adapter,
    AmbiguousError,
    Capabilities,
    ConfigError,
    DefinitiveError,
    InvalidPayload,
    Observation,
    Outcome,
    Receipt,
)
from effectgate.adapters.http_outcome import status_error, transport_error
from effectgate.adapters.redact import scrub
from effectgate.adapters.secrets import read_secret

CONTEXT_NAMES = frozenset({"action_id", "provider_key", "scope", "tool", "tenant"})
_KNOWN = {
    "base_url", "request", "verify", "expect", "response_expect", "absent_when", "absent_statuses",
    "definitive_statuses", "idempotency_header", "dedups_on_key", "key_retention",
    "consistency_window", "timeout", "token_env", "token_file", "auth_header", "auth_scheme",
    "receipt_id", "headers",
}  # fmt: skip


@dataclass(frozen=True)
class RequestTemplate:
    method: str
    url: str
    body: Any = None

    @classmethod
    def parse(cls, where: str, table: Any) -> RequestTemplate:
        if not isinstance(table, Mapping) or not isinstance(table.get("url"), str):
            raise ConfigError(f"{where}: a table with at least a string `url`")
        extra = set(table) - {"method", "url", "body"}
        if extra:
            raise ConfigError(f"{where}: unknown keys {sorted(extra)}")
        tpl.names(table["url"])
        tpl.names_in(table.get("body"))
        return cls(str(table.get("method", "POST")).upper(), table["url"], table.get("body"))

    def names(self) -> set[str]:
        return tpl.names(self.url) | tpl.names_in(self.body)


class HttpAdapter(Adapter):
    payload_type = struct_pb2.Struct

    def __init__(self, name: str, settings: Mapping[str, Any]) -> None:
        unknown = set(settings) - _KNOWN
        if unknown:
            raise ConfigError(f"adapters.{name}: unknown settings {sorted(unknown)}")
        where = f"adapters.{name}"
        self.name = name
        self._request = RequestTemplate.parse(f"{where}.request", settings.get("request"))
        self._verify = RequestTemplate.parse(f"{where}.verify", settings["verify"]) if "verify" in settings else None
        self._expect = tpl.parse_all(f"{where}.expect", settings.get("expect"))
        if self._verify is not None and not self._expect:
            raise ConfigError(f"{where}: `verify` needs at least one `expect` postcondition")
        self._response_expect = tpl.parse_all(f"{where}.response_expect", settings.get("response_expect"))
        self._absent_when = tpl.parse_all(f"{where}.absent_when", settings.get("absent_when"))
        self._absent_statuses = frozenset(int(s) for s in settings.get("absent_statuses", [404]))
        self._definitive = frozenset(int(s) for s in settings.get("definitive_statuses", [400, 404, 422]))
        self._idempotency_header = str(settings.get("idempotency_header", ""))
        self._receipt_id = str(settings.get("receipt_id", "id"))
        self._token = read_secret(settings, "token", required=False)
        headers = {str(k): str(v) for k, v in dict(settings.get("headers", {})).items()}
        headers.setdefault("Accept", "application/json")
        if self._token:
            scheme = str(settings.get("auth_scheme", "Bearer"))
            value = f"{scheme} {self._token}" if scheme else self._token
            headers[str(settings.get("auth_header", "Authorization"))] = value
        conds = [*self._expect, *self._response_expect, *self._absent_when]
        self._fields = (
            self._request.names()
            | (self._verify.names() if self._verify else set())
            | set().union(*(c.names() for c in conds))
        ) - CONTEXT_NAMES
        dedups = bool(settings.get("dedups_on_key", False))
        if dedups and not self._idempotency_header:
            raise ConfigError(f"{where}: dedups_on_key needs an idempotency_header")
        self._capabilities = Capabilities(
            dedups_on_key=dedups,
            key_retention=float(settings["key_retention"]) if dedups and "key_retention" in settings else None,
            consistency_window=float(settings.get("consistency_window", 30.0)),
            has_read_api=self._verify is not None,
        )
        self._client = httpx.AsyncClient(
            base_url=str(settings.get("base_url", "")),
            timeout=float(settings.get("timeout", 30.0)),
            headers=headers,
        )

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> HttpAdapter:
        return cls(name, settings)

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

    def _build(self, template: RequestTemplate, values: Mapping[str, Any], key: str = "") -> httpx.Request:
        headers = {self._idempotency_header: key} if key and self._idempotency_header else {}
        body = None if template.body is None else json.dumps(tpl.fill_json(template.body, values))
        if body is not None:
            headers["Content-Type"] = "application/json"
        url = tpl.fill(template.url, values, url=True)
        # The template (no payload values) is what tracing records as the URL.
        return self._client.build_request(
            template.method, url, content=body, headers=headers, extensions={"effectgate.url_template": template.url}
        )

    def _scrub(self, text: str) -> str:
        return scrub(text, (self._token,))

    async def execute(self, call: ActionCall) -> Receipt:
        values = self._values(call)
        what = f"{self.name} {self._request.method}"
        try:
            resp = await self._client.send(self._build(self._request, values, call.provider_key))
        except httpx.HTTPError as exc:
            raise transport_error(exc, what) from None
        if not resp.is_success:
            raise status_error(resp.status_code, resp.text, what, definitive=self._definitive, secrets=(self._token,))
        doc = _json_or_none(resp)
        wrong = tpl.failures(self._response_expect, doc, values)
        if wrong:
            # The provider says OK but shows a half-applied effect: not a success to record.
            raise AmbiguousError(
                f"{what}: answered {resp.status_code} but {self._scrub('; '.join(wrong))}", code="partial"
            )
        external = tpl.lookup(doc, self._receipt_id)
        return Receipt(
            external_id=str(external) if external not in (tpl.MISSING, None) else call.action_id,
            provider_request_id=resp.headers.get("Request-Id", resp.headers.get("X-Request-Id", "")),
            result=doc if isinstance(doc, dict) else {"status": resp.status_code},
        )

    async def verify(self, call: ActionCall) -> Observation:
        if self._verify is None:
            return Observation.unknown(f"no read API: {self.name} has no `verify` request configured")
        values = self._values(call)
        try:
            resp = await self._client.send(self._build(self._verify, values))
        except httpx.HTTPError as exc:
            return Observation.unknown(f"{self.name} verify failed: {type(exc).__name__}")
        if resp.status_code in self._absent_statuses:
            return Observation(Outcome.NOT_FOUND, detail=f"verify answered {resp.status_code}")
        if not resp.is_success:
            return Observation.unknown(f"{self.name} verify answered HTTP {resp.status_code}")
        doc = _json_or_none(resp)
        wrong = tpl.failures(self._expect, doc, values)
        if not wrong:
            evidence = doc if isinstance(doc, dict) else {}
            external = tpl.lookup(doc, self._receipt_id)
            ext = str(external) if external not in (tpl.MISSING, None) else call.action_id
            return Observation(
                Outcome.CONFIRMED,
                detail="every postcondition holds",
                evidence=evidence,
                receipt=Receipt(external_id=ext, result=evidence),
            )
        if self._absent_when and not tpl.failures(self._absent_when, doc, values):
            return Observation(Outcome.NOT_FOUND, detail=f"absent: {self._scrub('; '.join(wrong))}")
        # Something is there but not the whole effect (or absence is not provable).
        return Observation.unknown(f"postconditions fail: {self._scrub('; '.join(wrong))}")

    async def close(self) -> None:
        await self._client.aclose()


def _json_or_none(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return None
