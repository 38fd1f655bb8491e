"""`make bench`: what the gateway costs, measured side by side in one run.

Every figure below comes from the same run, the same simulator and the same machine minute, so
the ratios mean something on a noisy shared machine even when the absolute numbers drift. The
gateway runs as its own `effectgate serve` process (as in production); the simulator and the
load generator share this one:

- a direct call to the (zero-latency) Stripe simulator, the baseline;
- a new action through the gateway, SQLite `synchronous=FULL` (the default) and `NORMAL`;
- a replay (the same action again: one indexed read, no provider call);
- throughput with 16 concurrent agents.

Usage: python -m effectgate.bench [--n 300] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from effectgate.chaos.config_writer import write_config
from effectgate.chaos.process import ChildGateway, free_port
from effectgate.client import EffectGateClient, RunContext
from effectgate.simulators.stripe_sim import StripeSimulator
from effectgate.tools.v1.tools_pb2 import ChargeCard

API_KEY = "sk_test_bench"
CHARGE = ChargeCard(customer="cus_bench", amount=500, currency="usd", payment_method="pm_card_visa")


def summary(name: str, samples: list[float], wall: float) -> dict[str, float | str]:
    ordered = sorted(samples)
    return {
        "name": name,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "per_s": len(samples) / wall,
    }


async def measure(name: str, n: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> dict[str, float | str]:
    samples: list[float] = []
    slots = asyncio.Semaphore(concurrency)

    async def timed(i: int) -> None:
        async with slots:
            start = time.perf_counter()
            await one(i)
            samples.append(time.perf_counter() - start)

    wall = time.perf_counter()
    await asyncio.gather(*(timed(i) for i in range(n)))
    return summary(name, samples, time.perf_counter() - wall)


async def gateway_for(sim: StripeSimulator, workdir: Path, synchronous: str) -> tuple[ChildGateway, str]:
    target = f"127.0.0.1:{free_port()}"
    doc = {
        "server": {"listen": target},
        "store": {"url": f"sqlite:///{workdir}/{synchronous}.db?synchronous={synchronous}"},
        "adapters": {"stripe": {"api_base": sim.base_url, "api_key_env": "BENCH_STRIPE_KEY"}},
        "tools": {"charge_card": {"adapter": "stripe", "consistency_window": "1s"}},
    }
    child = ChildGateway(write_config(doc, workdir / f"{synchronous}.toml"))
    await child.start()
    return child, target


async def run(n: int, concurrency: int) -> list[dict[str, float | str]]:
    os.environ["BENCH_STRIPE_KEY"] = API_KEY
    sim = StripeSimulator(api_key=API_KEY)
    await sim.start()
    results = []
    workdir = Path(tempfile.mkdtemp(prefix="effectgate-bench-"))
    async with httpx.AsyncClient(base_url=sim.base_url, headers={"Authorization": f"Bearer {API_KEY}"}) as http:

        async def direct(i: int) -> None:
            form = {"customer": "cus_bench", "amount": "500", "currency": "usd", "payment_method": "pm_card_visa"}
            headers = {"Idempotency-Key": uuid.uuid4().hex}
            (
                await http.post("/v1/payment_intents", data={**form, "confirm": "true"}, headers=headers)
            ).raise_for_status()

        results.append(await measure("direct provider call", n, 1, direct))
        for synchronous in ("FULL", "NORMAL"):
            gateway, target = await gateway_for(sim, workdir, synchronous)
            client = EffectGateClient.connect(target)
            tag = uuid.uuid4().hex[:6]

            async def new(i: int, tag: str = tag, client: EffectGateClient = client) -> None:
                ctx = RunContext(run_id=f"bench-{tag}", step_id=f"step-{i}")
                await client.execute("charge_card", CHARGE, scope="s", context=ctx)

            async def replay(i: int, tag: str = tag, client: EffectGateClient = client) -> None:
                await client.execute("charge_card", CHARGE, scope="s", context=RunContext(f"bench-{tag}", f"step-{i}"))

            async def busy(i: int, tag: str = tag, client: EffectGateClient = client) -> None:
                ctx = RunContext(run_id=f"bench-{tag}-c", step_id=f"step-{i}")
                await client.execute("charge_card", CHARGE, scope="s", context=ctx)

            results.append(await measure(f"gateway new action ({synchronous})", n, 1, new))
            results.append(await measure(f"gateway replay ({synchronous})", n, 1, replay))
            results.append(await measure(f"gateway new, {concurrency} agents ({synchronous})", n, concurrency, busy))
            await client.close()
            await gateway.terminate()
    await sim.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description="effectgate benchmarks")
    parser.add_argument("--n", type=int, default=300, help="calls per measurement")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    results = asyncio.run(run(args.n, args.concurrency))
    base = float(results[0]["p50_ms"])
    print(f"{'measurement':40} {'p50 ms':>8} {'p99 ms':>8} {'calls/s':>9} {'p50 vs direct':>14}")
    for row in results:
        p50 = float(row["p50_ms"])
        print(
            f"{row['name']!s:40} {p50:8.2f} {float(row['p99_ms']):8.2f} {float(row['per_s']):9.0f} {p50 / base:13.1f}x"
        )


if __name__ == "__main__":
    main()
