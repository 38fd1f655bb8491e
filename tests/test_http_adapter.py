"""The generic HTTP adapter against the CRM simulator: HEAD reads, unsafe path values, absence rules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.protobuf import struct_pb2

from effectgate.adapters import ActionCall, DefinitiveError, Outcome, build_adapter
from effectgate.adapters.testing import new_call
from effectgate_lab.simulators.crm_sim import CrmSimulator
from tests.adapter_targets import CANARY, SECRET_ENV


@pytest.fixture
async def crm(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[CrmSimulator]:
    monkeypatch.setenv(SECRET_ENV, CANARY)
    sim = CrmSimulator(api_key=CANARY, visibility_lag=0.0)
    await sim.start()
    try:
        yield sim
    finally:
        await sim.stop()


def _table(crm: CrmSimulator, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "http",
        "base_url": crm.base_url,
        "token_env": SECRET_ENV,
        "request": {"url": "/invoices", "body": {"id": "{id}", "amount": "{amount}"}},
        **extra,
    }


def _invoice(invoice_id: str) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update({"id": invoice_id, "amount": 700})
    return out


async def test_a_head_read_sees_status_and_headers(crm: CrmSimulator) -> None:
    adapter = build_adapter(
        "inv",
        _table(
            crm,
            verify={"method": "HEAD", "url": "/invoices/{id}"},
            expect=[{"path": "status", "equals": 200}, {"path": "headers.content-type", "present": True}],
            absent_statuses=[404],
        ),
    )
    try:
        done = new_call(adapter, _invoice("inv_head1"))
        await adapter.execute(done)
        assert (await adapter.verify(done)).outcome is Outcome.CONFIRMED
        never = new_call(adapter, _invoice("inv_head2"))
        assert (await adapter.verify(never)).outcome is Outcome.NOT_FOUND
    finally:
        await adapter.close()


async def test_without_an_absence_rule_a_404_is_unknown(crm: CrmSimulator) -> None:
    table = _table(crm, verify={"url": "/invoices/{id}"}, expect=[{"path": "id", "present": True}])
    adapter = build_adapter("inv", table)
    try:
        obs = await adapter.verify(new_call(adapter, _invoice("inv_none")))
        assert obs.outcome is Outcome.UNKNOWN
        assert "404" in obs.detail and "no absence rule" in obs.detail
    finally:
        await adapter.close()


async def test_a_path_changing_value_is_never_sent(crm: CrmSimulator) -> None:
    adapter = build_adapter("act", {"kind": "http", "base_url": crm.base_url, "token_env": SECRET_ENV,
                                    "request": {"url": "/customers/{customer}/activate"}})  # fmt: skip
    try:
        payload = struct_pb2.Struct()
        payload.update({"customer": ".."})
        # normalize refuses it (INVALID_ARGUMENT at the gateway); execute refuses it too.
        call = ActionCall("act_1", "key_1", payload, scope="s", tool="t", tenant="t")
        before = crm.request_count
        with pytest.raises(DefinitiveError, match="not allowed in a URL path"):
            await adapter.execute(call)
        assert crm.request_count == before and crm.ledger == []
    finally:
        await adapter.close()
