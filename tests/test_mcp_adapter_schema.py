"""The `mcp` adapter reads the upstream's tools/list: the schema a payload is checked against (minus
the key argument), refreshed when the upstream announces a change, and `check --probe` refusing a
config whose tools the upstream does not list."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from effectgate.adapters import AdapterError, InvalidPayload
from effectgate.adapters.mcp import McpAdapter
from effectgate.adapters.testing import new_call
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.mcp_upstream.http import McpHttpSimulator
from tests.mcp_upstream_targets import CANARY, payload, table

TOKEN_ENV = "EG_TEST_MCP_SCHEMA_TOKEN"


@pytest.fixture
async def sim() -> AsyncIterator[McpHttpSimulator]:
    os.environ[TOKEN_ENV] = CANARY
    running = McpHttpSimulator("mail", token=CANARY)
    await running.start()
    try:
        yield running
    finally:
        await running.close()


def mail(sim: McpHttpSimulator, **changes: object) -> McpAdapter:
    return McpAdapter.from_settings("mail", {**table("mail"), "url": sim.url, "token_env": TOKEN_ENV, **changes})


async def test_the_schema_comes_from_upstream_and_follows_its_changes(sim: McpHttpSimulator) -> None:
    adapter = mail(sim)
    try:
        await adapter.upstream_tools()
        schema = adapter.input_schema()
        assert schema is not None and set(schema["properties"]) == {"to", "subject", "body"}
        with pytest.raises(InvalidPayload) as wrong:
            adapter.normalize(payload("mail", "a", subject=5))
        assert wrong.value.field == "subject"
        with pytest.raises(InvalidPayload) as forged:  # the model must not choose the key
            adapter.normalize(payload("mail", "a", idempotency_key="mine"))
        assert forged.value.field == "idempotency_key"

        sim.upstream.change_schema()  # announced on the next call
        await adapter.execute(new_call(adapter, payload("mail", "b")))
        await asyncio.wait_for(adapter.schema_refreshed.wait(), 20)
        assert adapter.schema_changes >= 1
        assert "reply_to" in (adapter.input_schema() or {})["properties"]
    finally:
        await adapter.close()


async def test_probe_refuses_tools_the_upstream_does_not_list(sim: McpHttpSimulator) -> None:
    cases: list[tuple[dict[str, object], str]] = [
        ({}, ""),
        ({"tool": "send_mail"}, "the upstream lists no tool 'send_mail'"),
        ({"verify": {"tool": "search_messages"}}, "the upstream lists no tool 'search_messages'"),
        ({"key_argument": "request_id"}, "takes no argument 'request_id'"),
    ]
    for changes, refusal in cases:
        adapter = mail(sim, **changes)
        try:
            if not refusal:
                assert "send_message" in await adapter.probe()
                continue
            with pytest.raises(AdapterError) as refused:
                await adapter.probe()
            assert refusal in refused.value.message
            assert CANARY not in refused.value.message
        finally:
            await adapter.close()


async def test_check_probe_refuses_the_config(sim: McpHttpSimulator, tmp_path: Path) -> None:
    doc = {
        "store": {"url": f"sqlite:///{tmp_path / 'eg.db'}"},
        "adapters": {
            "mail": {"kind": "mcp", **table("mail"), "url": sim.url, "token_env": TOKEN_ENV, "tool": "send_mail"}
        },
        "tools": {"send_message": {"adapter": "mail", "consistency_window": "2s"}},
    }
    path = write_config(doc, tmp_path / "effectgate.toml")
    cmd = [sys.executable, "-m", "effectgate.gateway", "check", "--probe", "--config", str(path)]
    done = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "[adapters.mail] probe failed: the upstream lists no tool 'send_mail'" in done.stderr + done.stdout
