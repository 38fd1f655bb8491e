"""A consistency window that learns (docs/webhooks.md): the gateway follows confirmed writes with
receipt-less read-backs, records how long the Stripe simulator's search took to show each one
(`search_lag`), keeps the lags in the store, and then `effectgate check` (a real process) and a
warning log line say that a window configured at half the lag is too short, while
`consistency_window = "auto"` turns into the observed p99 with its margin."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from asyncio.subprocess import PIPE
from pathlib import Path
from typing import Any

import pytest

from effectgate.client import run, step
from effectgate.gateway.config import ConsistencySection, parse_config
from effectgate.gateway.core import BoundTool, LagBook, LagSampler, quantile
from effectgate.gateway.store import open_store
from effectgate.testing import ScriptedAdapter, rig
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.chaos.config_writer import dump_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, config_doc, start_gateway, stripe_tools

LAG = 0.6
SAMPLES = 6


def doc_for(tmp_path: Path, sim: StripeSimulator, window: Any) -> dict[str, Any]:
    doc: dict[str, Any] = config_doc(
        f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url, consistency_window=window)
    )
    doc["consistency"] = {"sample_every": 1, "min_samples": 5, "floor": "0.05s", "margin": 0.5}
    return doc


async def lags_in_store(tmp_path: Path) -> list[float]:
    store = open_store(f"sqlite:///{tmp_path}/eg.db")
    await store.open()
    try:
        return await store.read_lags("stripe")
    finally:
        await store.close()


def test_quantiles_never_optimistic() -> None:
    assert quantile([0.1] * 19 + [0.9], 0.99) == 0.9
    assert quantile([0.3, 0.1, 0.2], 0.5) == 0.2
    book = LagBook(parse_config({"consistency": {"min_samples": 3, "floor": "1s"}}).consistency)
    assert book.window("k", declared=60.0) == 60.0  # nothing learned yet: the adapter's own
    for lag in (0.2, 0.4, 0.4):
        book.add("k", lag)
    assert book.window("k", declared=60.0) == 1.0  # the floor
    book.add("k", 2.0)
    assert book.window("k", declared=60.0) == pytest.approx(3.0)  # p99 x 1.5


async def test_a_probe_first_reads_at_half_the_shortest_known_lag() -> None:
    """Reads earlier than half the shortest lag already known would find nothing: the probe skips
    them (5 reads here, where polling from the answer on takes about 10) and still measures long."""
    lag = 0.4
    adapter = ScriptedAdapter(time.monotonic, search_lag=lag)
    r = await rig(adapter=adapter)
    book = LagBook(ConsistencySection(sample_every=1))
    tool = BoundTool(r.tool, adapter, book)
    book.add(tool.lag_key, lag)
    sampler = LagSampler(r.store, book, clock=time.monotonic)
    sent_at = time.monotonic()
    result = await r.execute()
    sampler.on_answered(result.record, tool, sent_at)
    await sampler.drain()
    assert book.count(tool.lag_key) == 2
    assert book.shortest(tool.lag_key) >= lag - 0.01  # measured long, never short
    # Sleeps never end early: the first read is at 0.2 s or later, then every 25 % of that.
    assert 1 <= len(adapter.verified) <= 6, len(adapter.verified)


async def test_observed_lag_flags_a_short_window_and_feeds_auto(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with StripeSimulator(api_key=API_KEY, search_lag=LAG) as sim:
        assert isinstance(sim, StripeSimulator)
        doc = doc_for(tmp_path, sim, f"{LAG / 2}s")
        live = await start_gateway(doc)
        caplog.set_level(logging.WARNING, "effectgate.lag")
        try:
            for n in range(SAMPLES):
                with run(f"lag-{n}"), step("charge"):
                    payload = ChargeCard(
                        customer="cus_42", amount=500 + n, currency="usd", payment_method="pm_card_visa"
                    )
                    answer = await live.client.execute("charge_card", payload, scope=f"o{n}", timeout=10)
                assert answer.action.state == pb.EFFECT_STATE_CONFIRMED
            loop = asyncio.get_running_loop()
            end = loop.time() + 30
            while loop.time() < end:  # the probes run after the answers: wait for their records
                if len(await lags_in_store(tmp_path)) >= SAMPLES:
                    break
                await asyncio.sleep(0.1)
        finally:
            await live.close()
        lags = await lags_in_store(tmp_path)
        assert len(lags) == SAMPLES, lags
        assert all(LAG <= lag < LAG * 2 + 0.5 for lag in lags), lags  # measured long, never short
        assert any("shorter than the observed p99 read lag" in r.getMessage() for r in caplog.records)
        assert len(sim.ledger) == SAMPLES  # the probes only read

        path = tmp_path / "effectgate.toml"
        path.write_text(dump_config(doc))
        env = {**os.environ}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "effectgate.gateway",
            "check",
            "--config",
            str(path),
            stdout=PIPE,
            stderr=PIPE,
            env=env,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert "window: WARNING: [tools.charge_card] consistency_window 0.3s is shorter than the observed p99" in (
            out.decode()
        ), out.decode()

        auto = parse_config(doc_for(tmp_path, sim, "auto"))
        book = LagBook(auto.consistency)
        auto_tool = BoundTool(auto.tools["charge_card"], live.gateway.adapters["stripe"], book)
        store = open_store(auto.store_url)
        await store.open()
        await book.load(store, ["stripe"])
        await store.close()
        assert auto_tool.consistency_window == pytest.approx(max(lags) * 1.5)
        assert auto_tool.consistency_window > LAG
