"""The audit trail's commands in real processes: `effectgate events` (export, filters, --watch
following a live gateway) and `effectgate audit verify` (exit 1 and the row named after a hand
edit), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import start_gateway
from tests.store_backends import Backend
from tests.test_event_chain import TOKENS, auth, chained_store, charge, doc, run_cli, tamper, toml
from tests.test_operator_cli import WATCH_WAIT


async def test_audit_verify_command_exits_nonzero_and_names_the_row(
    backend: Backend, sim: StripeSimulator, tmp_path: Path
) -> None:
    live, events = await chained_store(backend, sim)
    config = tmp_path / "gateway.toml"
    config.write_text(toml(doc(backend.url, sim)))
    try:
        ok = await run_cli("audit", "verify", "--config", str(config))
        assert ok[0] == 0 and "chain verified" in ok[1], ok
        since = await run_cli("audit", "verify", "--config", str(config), "--since", "1h", "-o", "json")
        assert since[0] == 0 and '"verified": true' in since[1], since
        edited = events[1]
        await tamper(backend, ("UPDATE action_events SET principal = ? WHERE seq = ?", ("mallory", edited.event.seq)))
        code, out = await run_cli("audit", "verify", "--config", str(config))
        assert code == 1 and f"chain BROKEN at row {edited.event.seq}" in out, out
        assert f"position {edited.position}" in out and edited.hash in out
    finally:
        await live.close()


@pytest.mark.timeout(360)  # the waits below are WATCH_WAIT each: room for a loaded machine
async def test_events_command_exports_and_follows_the_trail(tmp_path: Path, sim: StripeSimulator) -> None:
    live = await start_gateway(doc(f"sqlite:///{tmp_path}/eg.db", sim))
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_")}
    env |= {"EFFECTGATE_TOKEN": TOKENS[("acme", "operator")], "EFFECTGATE_TARGET": live.target, "LC_ALL": "C.UTF-8"}
    try:
        first = await live.stub.Execute(charge("a"), metadata=auth("acme", "agent"))
        await live.stub.Execute(charge("g"), metadata=auth("globex", "agent"))
        code, out = await run_cli("events", "--since", "1h", "-o", "json", env=env)
        assert code == 0, out
        rows = json.loads(out)
        assert rows and {r["action_id"] for r in rows} == {first.action.action_id}
        assert [r["position"] for r in rows] == list(range(1, len(rows) + 1))
        assert rows[0]["kind"] == "claim" and rows[0]["tenant"] == "acme" and rows[0]["prev_hash"] == ""
        code, table = await run_cli("events", "--kind", "claim", env=env)
        assert code == 0 and table.splitlines()[0].split()[:3] == ["AT", "POS", "ACTION"], table
        assert first.action.action_id in table and len(table.splitlines()) == 2
        # --watch: what is there, then each new event as one JSON line, until Ctrl-C.
        follower = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "effectgate.gateway", "events", "--watch", "--interval", "0.1s", "-o", "json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        assert follower.stdout is not None
        try:
            seen = [json.loads(await asyncio.wait_for(follower.stdout.readline(), WATCH_WAIT)) for _ in rows]
            assert [s["hash"] for s in seen] == [r["hash"] for r in rows]
            later = await live.stub.Execute(charge("b"), metadata=auth("acme", "agent"))
            line = json.loads(await asyncio.wait_for(follower.stdout.readline(), WATCH_WAIT))
            assert line["action_id"] == later.action.action_id and line["position"] == len(rows) + 1
            assert line["prev_hash"] == rows[-1]["hash"]
        finally:
            follower.send_signal(signal.SIGINT)
            await asyncio.wait_for(follower.wait(), WATCH_WAIT)
        assert follower.returncode == 0
    finally:
        await live.close()
