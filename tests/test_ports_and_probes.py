"""The metrics port: /livez, /readyz (503 while the store is locked), 404 elsewhere; one endpoint
for a `serve --workers 2` pool with both workers' counts; a taken port is one line and exit 2."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import grpc
from prometheus_client.parser import text_string_to_metric_families

from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools
from tests.serve_child import ServeChild, http_get, http_until
from tests.test_execute import request
from tests.test_readiness import HOLD_LOCK


def actions_by_worker(text: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "effectgate_actions_total":
                worker = sample.labels.get("worker", "")
                counts[worker] = counts.get(worker, 0.0) + sample.value
    return counts


async def test_a_worker_pool_has_one_metrics_endpoint_and_http_probes(tmp_path: Path, sim: StripeSimulator) -> None:
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", gateway={"health_interval": "0.2s"}, **stripe_tools(sim.base_url))
    doc["telemetry"] = {"prometheus_listen": "127.0.0.1:0"}  # the port it binds is announced
    child = await ServeChild.for_config(doc, tmp_path / "eg.toml", "--workers", "2").start()
    try:
        port = await child.ready()
        metrics = await child.metrics_port()
        assert (await http_get(metrics, "/livez")).status_code == 200
        assert (await http_get(metrics, "/healthz")).status_code == 404
        assert (await http_get(metrics, "/")).status_code == 404
        await http_until(metrics, "/readyz", lambda r: r.status_code == 200, "ready")

        # New connections land on either worker (SO_REUSEPORT): call until both have counted.
        calls = 0

        async def both_counted() -> dict[str, float]:
            nonlocal calls
            while True:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                    stub = gateway_pb2_grpc.EffectGatewayStub(channel)
                    await stub.Execute(request(step=f"s{calls}"), timeout=30)
                calls += 1
                counts = actions_by_worker((await http_get(metrics, "/metrics")).text)
                if set(counts) == {"0", "1"}:
                    return counts
                await asyncio.sleep(0.05)

        counts = await asyncio.wait_for(both_counted(), 120)
        assert all(v >= 1 for v in counts.values())
        # Every call is counted once, by the worker that served it (a scrape may lag its call).
        await http_until(
            metrics, "/metrics", lambda r: sum(actions_by_worker(r.text).values()) == calls, f"{calls} calls counted"
        )

        # Another process holds the SQLite write lock: not ready, then ready again.
        holder = await asyncio.create_subprocess_exec(
            sys.executable, "-c", HOLD_LOCK, str(tmp_path / "eg.db"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert holder.stdout is not None and holder.stdin is not None
        assert (await asyncio.wait_for(holder.stdout.readline(), 60)).strip() == b"locked"
        locked = await http_until(metrics, "/readyz", lambda r: r.status_code == 503, "503 while locked")
        assert "store" in locked.text
        assert (await http_get(metrics, "/livez")).status_code == 200
        holder.stdin.close()
        await asyncio.wait_for(holder.wait(), 60)
        await http_until(metrics, "/readyz", lambda r: r.status_code == 200, "ready again")
    finally:
        assert await child.stop() == 0, child.transcript()


async def test_single_gateway_probes(tmp_path: Path, sim: StripeSimulator) -> None:
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url))
    doc["telemetry"] = {"prometheus_listen": "127.0.0.1:0"}  # the port it binds is announced
    child = await ServeChild.for_config(doc, tmp_path / "eg.toml").start()
    try:
        await child.ready()
        metrics = await child.metrics_port()
        # Said on stdout right after the ready line: where the probes are, port 0 or not.
        ready_at = next(n for n, line in enumerate(child.stdout) if "serving on port" in line)
        assert child.stdout[ready_at + 1] == f"effectgate metrics on port {metrics}", child.transcript()
        assert (await http_get(metrics, "/readyz")).status_code == 200
        assert (await http_get(metrics, "/livez")).status_code == 200
        assert (await http_get(metrics, "/metrics")).status_code == 200
        assert (await http_get(metrics, "/nope")).status_code == 404
    finally:
        assert await child.stop() == 0


async def test_a_taken_metrics_port_is_one_line_and_exit_2(tmp_path: Path, sim: StripeSimulator) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url))
        doc["telemetry"] = {"prometheus_listen": f"127.0.0.1:{port}"}
        for options in ((), ("--workers", "2")):
            child = await ServeChild.for_config(doc, tmp_path / "eg.toml", *options).start()
            assert await child.exit_code() == 2, child.transcript()
            lines = [line for line in child.stderr if line.strip()]
            assert len(lines) == 1 and "Traceback" not in lines[0], child.transcript()
            assert lines[0].startswith(f"effectgate: cannot listen on 127.0.0.1:{port}"), lines
            assert "prometheus_listen" in lines[0] and "in use" in lines[0]
