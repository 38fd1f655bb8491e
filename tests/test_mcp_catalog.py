"""Unit tests of the front door's pure parts: the `_meta` contract, the catalog read from the
gateway's TOML, and the argument schemas derived from protobuf descriptors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2

from effectgate.mcp.catalog import CatalogError, load_catalog, parse_catalog
from effectgate.mcp.contract import META_KEY, MissingRunContext, parse_call_context, run_meta, trace_carrier
from effectgate.mcp.schemas import ArgumentCheck, InvalidArguments, message_schema
from effectgate.tools.v1 import tools_pb2

STRIPE: dict[str, Any] = {
    "adapters": {"stripe": {"api_base": "http://x"}},
    "tools": {"charge_card": {"adapter": "stripe"}},
}


def test_run_meta_round_trips_and_ignores_nothing_it_needs() -> None:
    meta = run_meta("r", "s", scope="order:1", agent="a", traceparent="00-abc-def-01")
    ctx = parse_call_context(meta)
    assert (ctx.run_id, ctx.step_id, ctx.scope, ctx.agent, ctx.parent_run_id) == ("r", "s", "order:1", "a", "")
    assert trace_carrier(meta) == {"traceparent": "00-abc-def-01"}


@pytest.mark.parametrize(
    "meta",
    [None, {}, {META_KEY: "run-1"}, {META_KEY: {"run_id": "r"}}, {META_KEY: {"run_id": "r", "step_id": 5}}],
)
def test_an_incomplete_run_context_is_refused(meta: Any) -> None:
    with pytest.raises(MissingRunContext, match=META_KEY.replace(".", r"\.")):
        parse_call_context(meta)


def test_catalog_reads_only_what_it_needs_and_tolerates_the_rest() -> None:
    doc = {**STRIPE, "server": {"listen": "127.0.0.1:1"}, "principals": [{"name": "x"}], "future": {"key": 1}}
    catalog = parse_catalog(doc)
    tool = catalog.tools["charge_card"]
    assert tool.payload_type is tools_pb2.ChargeCard and not tool.harmless and not catalog.allow_fresh_for_harmless


def test_a_struct_tool_needs_a_declared_schema(tmp_path: Path) -> None:
    doc: dict[str, Any] = {"adapters": {"tickets": {"kind": "http"}}, "tools": {"open_ticket": {"adapter": "tickets"}}}
    with pytest.raises(CatalogError, match="input_schema_file"):
        parse_catalog(doc)
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    (tmp_path / "ticket.json").write_text(json.dumps(schema))
    config = tmp_path / "effectgate.toml"
    config.write_text(
        '[adapters.tickets]\nkind = "http"\n[tools.open_ticket]\nadapter = "tickets"\n'
        '[mcp.tools.open_ticket]\ninput_schema_file = "ticket.json"\ndescription = "Open a ticket"\n'
    )
    tool = load_catalog(config).tools["open_ticket"]
    assert tool.payload_type is struct_pb2.Struct and tool.description == "Open a ticket"
    check = ArgumentCheck(tool)
    payload = check.payload({"title": "printer on fire"})
    assert isinstance(payload, struct_pb2.Struct) and payload["title"] == "printer on fire"
    with pytest.raises(InvalidArguments):
        check.payload({})


def test_mcp_tables_must_name_configured_tools() -> None:
    with pytest.raises(CatalogError, match="not \\[tools"):
        parse_catalog({**STRIPE, "mcp": {"tools": {"ghost": {}}}})


def test_schemas_follow_the_descriptor_and_the_adapters_rules() -> None:
    schema = message_schema(tools_pb2.SendEmail.DESCRIPTOR)
    assert set(schema["properties"]) == {"to", "from", "subject", "text"}
    assert schema["additionalProperties"] is False and "text" not in schema["required"]
    check = ArgumentCheck(parse_catalog(STRIPE).tools["charge_card"])
    good: dict[str, Any] = {"customer": "cus_1", "amount": 5, "currency": "usd", "payment_method": "pm"}
    assert check.payload(good) == tools_pb2.ChargeCard(**good)
    with pytest.raises(InvalidArguments) as bad:
        check.payload({**good, "amount": 0, "currency": "us"})
    assert len(bad.value.problems) == 2
