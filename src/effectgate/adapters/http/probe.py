"""`effectgate check --probe` for the `http` adapter's verify read: the configured read of an action
that never happened.

Harmless by construction: the settings refuse a `verify` that is not a GET or HEAD, or that has a
body. Honest by construction: every payload field and every context value (action id, key, scope,
tool, tenant) is a fresh made-up value, `effectgate-probe-<hex>`, that names nothing at the
provider. So the read checks, before the first real action needs it, that the endpoint answers,
that it takes the credentials, and that it does not confirm what never happened (a read that
ignores the id, or postconditions that hold for any answer, would confirm every lost write).
What it cannot judge: whether the read finds a write that does exist (that takes a write: the
conformance suite's checks against a simulator).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Protocol

import httpx
from google.protobuf import struct_pb2

from effectgate.adapters.base import ActionCall, AdapterError, CredentialsRefused, Observation, Outcome
from effectgate.adapters.http import template as tpl
from effectgate.adapters.http.settings import RequestSpec


class ProbedAdapter(Protocol):
    """What the probe reads of the `http` adapter (adapter.py), named here so neither module
    imports the other's."""

    @property
    def client(self) -> httpx.AsyncClient: ...

    @property
    def payload_fields(self) -> set[str]: ...

    def values_of(self, call: ActionCall) -> dict[str, Any]: ...

    def request_of(self, spec: RequestSpec, values: Mapping[str, Any]) -> httpx.Request: ...

    def observed(self, resp: httpx.Response, values: Mapping[str, Any], call: ActionCall) -> Observation: ...


def made_up_call(fields: set[str]) -> ActionCall:
    """An action that never happened: every field the templates use, and the context, made up."""
    made_up = f"effectgate-probe-{uuid.uuid4().hex[:12]}"
    payload = struct_pb2.Struct()
    payload.update(dict.fromkeys(fields, made_up))
    return ActionCall(
        action_id=made_up, provider_key=made_up, payload=payload, scope=made_up, tool=made_up, tenant=made_up
    )


async def verify_read(adapter: ProbedAdapter, spec: RequestSpec) -> str:
    """The verify read of a made-up action: what it proved, or an error the operator must see."""
    where = f"verify {spec.method} {spec.url}"
    call = made_up_call(adapter.payload_fields)
    values = adapter.values_of(call)
    try:
        resp = await adapter.client.send(adapter.request_of(spec, values))
    except tpl.UnsafeValue as exc:  # a made-up value never changes a path; kept for the type's sake
        raise AdapterError(f"{where}: {exc}", code="template") from None
    except httpx.HTTPError as exc:
        raise AdapterError(f"{where}: no answer ({type(exc).__name__})", code="connect") from None
    if resp.status_code in (401, 403):
        raise CredentialsRefused(f"{where}: refused (HTTP {resp.status_code})")
    if resp.status_code >= 500:
        raise AdapterError(f"{where}: HTTP {resp.status_code}", code=f"http_{resp.status_code}")
    seen = adapter.observed(resp, values, call)
    if seen.outcome is Outcome.CONFIRMED:
        raise AdapterError(
            f"{where}: CONFIRMED an action that never happened (every id made up): this read would confirm"
            " any lost write; make it name the action (an id in the URL) and `expect` what only that action has",
            code="verify_confirms_anything",
        )
    if seen.outcome is Outcome.NOT_FOUND:
        return f"{where}: HTTP {resp.status_code}, NOT_FOUND for an action that never happened"
    return (
        f"{where}: HTTP {resp.status_code}, UNKNOWN for an action that never happened ({seen.detail}):"
        " a lost answer will wait for an operator (`absent_statuses` or `absent_when` prove absence)"
    )
