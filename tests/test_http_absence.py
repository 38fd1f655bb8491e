"""The generic HTTP adapter never guesses absence: through a real gateway and the CRM simulator.

A verify URL with a typo 404s on every read. Before, a 404 counted as proof of absence by
default, so every lost answer became a second write (two invoice rows, CONFIRMED). Now a tool
states what proves absence; without a rule a lost answer ends UNKNOWN for an operator, and the
provider holds exactly one row however often the agent asks again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2

from effectgate.client.context import RunContext
from effectgate.v1 import gateway_pb2
from effectgate_lab.simulators.crm_sim import CrmSimulator
from tests.adapter_targets import CANARY, SECRET_ENV, scenario
from tests.harness import config_doc, start_gateway


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, CANARY)


def _invoice(invoice_id: str) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update({"id": invoice_id, "amount": 1250, "currency": "usd"})
    return out


def _rows(crm: CrmSimulator, invoice_id: str) -> int:
    return sum(1 for entry in crm.ledger if entry["params"]["id"] == invoice_id)


async def _run(tmp_path: Path, adapter: dict[str, Any], crm: CrmSimulator, invoice_id: str) -> gateway_pb2.Action:
    """One logical action, its answer lost once; the agent asks three times, the reconciler runs."""
    doc = config_doc(
        f"sqlite:///{tmp_path / 'effects.db'}",
        adapters={"crm_invoice": adapter},
        tools={
            "record_invoice": {
                "adapter": "crm_invoice",
                "consistency_window": "0s",
                "attempt_timeout": "2s",
                "deadline": "5s",
                "max_attempts": 4,
            }
        },
    )
    crm.injector.script(["drop_after_commit"])
    live = await start_gateway(doc)
    try:
        ctx = RunContext(run_id=f"run-{invoice_id}", step_id="step-1", agent="planner")
        first = await live.client.execute(
            "record_invoice", _invoice(invoice_id), scope=f"invoice:{invoice_id}", context=ctx
        )
        for _ in range(2):  # a re-planning model asks again with fresh tool-call ids
            again = await live.client.execute(
                "record_invoice", _invoice(invoice_id), scope=f"invoice:{invoice_id}", context=ctx
            )
            assert again.action.action_id == first.action.action_id
        # Let the reconciler re-check a few times (recheck_min is 0.2 s in the harness).
        await asyncio.sleep(1.5)
        verified = await live.client.verify(first.action.action_id)
        action = await live.client.get(first.action.action_id)
        assert verified.action.state == action.state
        return action
    finally:
        await live.close()


async def test_a_404_on_every_read_without_an_absence_rule_ends_unknown(tmp_path: Path) -> None:
    crm = CrmSimulator(api_key=CANARY, visibility_lag=0.0)
    url = await crm.start()
    try:
        table = scenario("crm_invoice") | {"base_url": url, "token_env": SECRET_ENV}
        # The typo: a read that 404s whatever exists; and no absence rule at all.
        table["verify"] = {"method": "GET", "url": "/invoice/{id}"}
        table["expect"] = [{"path": "id", "equals": "{id}"}]
        table.pop("absent_when")
        action = await _run(tmp_path, table, crm, "inv_typo1")
        assert action.state == gateway_pb2.EFFECT_STATE_UNKNOWN, action
        assert "404" in action.reason and "no absence rule" in action.reason, action.reason
        assert action.attempts == 1
        assert _rows(crm, "inv_typo1") == 1, crm.ledger
    finally:
        await crm.stop()


async def test_the_documented_list_read_proves_the_one_row(tmp_path: Path) -> None:
    crm = CrmSimulator(api_key=CANARY, visibility_lag=0.0)
    url = await crm.start()
    try:
        table = scenario("crm_invoice") | {"base_url": url, "token_env": SECRET_ENV}
        action = await _run(tmp_path, table, crm, "inv_list1")
        assert action.state == gateway_pb2.EFFECT_STATE_CONFIRMED, action
        assert _rows(crm, "inv_list1") == 1, crm.ledger
    finally:
        await crm.stop()
