"""The `http` adapter's receipt is the provider's id however the action was confirmed: from the
write's answer (`receipt_id`), or, after a lost answer, from the read-back's (`verify.receipt_id`,
a path of its own, since a list-shaped read holds the id at `data.0.id`). Both ways through an
in-process gateway (gRPC on loopback) against the CRM simulator."""

# ruff: noqa: F811 - `crm` is the fixture imported from test_http_adapter
from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import struct_pb2

from effectgate.adapters import ConfigError, build_adapter
from effectgate.client import RunContext, State
from effectgate.testing import gateway
from effectgate_lab.simulators.crm_sim import CrmSimulator
from tests.adapter_targets import SECRET_ENV, scenario
from tests.test_http_adapter import crm  # noqa: F401 - the CRM simulator fixture


def invoice_table(crm: CrmSimulator, **changes: Any) -> dict[str, Any]:
    """The documented record_invoice table (docs/examples/crm-http-adapters.toml)."""
    return scenario("crm_invoice") | {"base_url": crm.base_url, "token_env": SECRET_ENV, **changes}


def invoice(invoice_id: str) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update({"id": invoice_id, "amount": 1250, "currency": "usd"})
    return out


async def receipts(crm: CrmSimulator, table: dict[str, Any]) -> tuple[str, str, str]:
    """The receipts of one invoice recorded normally and one whose answer was lost, and the
    lost one's action id."""
    tools = {"record_invoice": {"adapter": "crm"}}
    async with gateway(adapters={"crm": build_adapter("crm", table)}, tools=tools) as gw:
        ctx = RunContext(run_id="run-1", step_id="answered")
        answered = await gw.client.execute("record_invoice", invoice("inv_answered"), scope="inv:1", context=ctx)
        crm.injector.script(["drop_after_commit"])
        ctx = RunContext(run_id="run-1", step_id="lost")
        lost = await gw.client.execute("record_invoice", invoice("inv_lost"), scope="inv:2", context=ctx)
    assert answered.action.state == State.CONFIRMED, answered.action
    assert lost.action.state == State.CONFIRMED, lost.action
    assert [d for d in crm.injector.decisions if d is not None] == ["drop_after_commit"]
    assert len(crm.ledger) == 2  # one invoice each: the lost answer was read back, not re-sent
    return answered.action.receipt.external_id, lost.action.receipt.external_id, lost.action.action_id


async def test_a_receipt_is_the_providers_id_however_the_action_was_confirmed(crm: CrmSimulator) -> None:
    answered, lost, _ = await receipts(crm, invoice_table(crm))
    assert (answered, lost) == ("inv_answered", "inv_lost")


async def test_without_a_read_path_the_read_back_receipt_is_not_the_providers_id(crm: CrmSimulator) -> None:
    # The one path of the table (`id`) reads the create answer; on the list-shaped read it finds
    # nothing, and the receipt falls back to the action id: why `verify.receipt_id` exists.
    table = invoice_table(crm)
    table["verify"] = {k: v for k, v in table["verify"].items() if k != "receipt_id"}
    answered, lost, action_id = await receipts(crm, table)
    assert answered == "inv_answered" and lost == action_id


def test_receipt_id_belongs_to_the_read_not_to_the_write(crm: CrmSimulator) -> None:
    table = invoice_table(crm)
    table["request"] = {**table["request"], "receipt_id": "id"}
    with pytest.raises(ConfigError, match=r"request\.receipt_id: unknown key"):
        build_adapter("crm", table)
