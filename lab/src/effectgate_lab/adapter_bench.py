"""The Stripe adapter's own cost per call, against a raw POST of the same request.

    python -m effectgate_lab.adapter_bench [--n 2000] [--profile]

The Stripe simulator runs in its own process, so what this process spends is the client side
only. Every path sends the same PaymentIntent create (form-encoded, `Idempotency-Key`, keep-alive
connection) and parses the JSON answer: a raw aiohttp POST (the baseline: the HTTP library the
adapter uses), the adapter (the official SDK's request encoding and error handling on its aiohttp
client, and the adapter's own classification and receipt), and a raw httpx POST (the SDK's
default client, for context). The paths run in interleaved rounds. Printed per path: wall p50 /
p99 per call and this process's CPU time per call (the median round); the adapter's overhead is
its difference from the baseline.
`--profile` then profiles the adapter path and prints its top functions by own time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import httpx

from effectgate.adapters.base import ActionCall
from effectgate.adapters.registry import build_adapter
from effectgate.tools.v1.tools_pb2 import ChargeCard

API_KEY = "sk_test_adapter_bench"
KEY_ENV = "EFFECTGATE_ADAPTER_BENCH_KEY"
CHARGE = ChargeCard(customer="cus_bench", amount=500, currency="usd", payment_method="pm_card_visa")


@dataclass(frozen=True)
class Result:
    name: str
    p50_ms: float
    p99_ms: float
    cpu_us: float  # this process's CPU time per call


def start_simulator() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "effectgate_lab.simulators", "stripe", "--api-key", API_KEY],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.kill()
        raise SystemExit(f"the simulator did not start: {url!r}")
    return proc, url


class Path:
    """One path's samples over interleaved rounds (a loaded machine drifts; rounds share it)."""

    def __init__(self, name: str, call: Callable[[int], Awaitable[None]]) -> None:
        self.name, self.call = name, call
        self.samples: list[float] = []
        self.cpu_per_round: list[float] = []
        self.done = 0

    async def round(self, n: int) -> None:
        cpu = time.process_time()
        for _ in range(n):
            start = time.perf_counter()
            await self.call(self.done)
            self.samples.append(time.perf_counter() - start)
            self.done += 1
        self.cpu_per_round.append((time.process_time() - cpu) / n)

    def result(self) -> Result:
        samples = sorted(self.samples)
        return Result(
            self.name,
            p50_ms=statistics.median(samples) * 1000,
            p99_ms=samples[int(0.99 * (len(samples) - 1))] * 1000,
            # The median round: one busy spell of the machine does not decide the figure.
            cpu_us=statistics.median(self.cpu_per_round) * 1e6,
        )


async def measure(paths: list[Path], n: int, rounds: int) -> list[Result]:
    for path in paths:  # warm up: connections, caches, first imports
        await path.round(min(100, n))
        path.samples.clear()
        path.cpu_per_round.clear()
    per_round = max(n // rounds, 1)
    for _ in range(rounds):
        for path in paths:
            await path.round(per_round)
    return [p.result() for p in paths]


def raw_form(action_id: str) -> dict[str, str]:
    """The form the adapter's SDK call sends (same fields, same encoding)."""
    return {
        "amount": str(CHARGE.amount),
        "currency": CHARGE.currency,
        "customer": CHARGE.customer,
        "confirm": "true",
        "off_session": "true",
        "automatic_payment_methods[enabled]": "true",
        "automatic_payment_methods[allow_redirects]": "never",
        "metadata[effectgate_action_id]": action_id,
        "payment_method": CHARGE.payment_method,
    }


async def run(n: int, rounds: int, profile: bool) -> tuple[list[Result], str]:
    os.environ[KEY_ENV] = API_KEY
    proc, url = start_simulator()
    tag = uuid.uuid4().hex[:8]
    report = ""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    http = httpx.AsyncClient(base_url=url, headers=headers, timeout=30)
    session = aiohttp.ClientSession(base_url=url, headers=headers, timeout=aiohttp.ClientTimeout(total=30))
    adapter = build_adapter("stripe", {"api_base": url, "api_key_env": KEY_ENV, "timeout": 30})
    payload = adapter.normalize(CHARGE)
    try:

        async def raw(i: int) -> None:
            action = f"act_raw_{tag}_{i}"
            async with session.post(
                "/v1/payment_intents", data=raw_form(action), headers={"Idempotency-Key": f"key_{action}"}
            ) as resp:
                resp.raise_for_status()
                assert (await resp.json())["status"] == "succeeded"

        async def raw_httpx(i: int) -> None:
            action = f"act_httpx_{tag}_{i}"
            resp = await http.post(
                "/v1/payment_intents", data=raw_form(action), headers={"Idempotency-Key": f"key_{action}"}
            )
            resp.raise_for_status()
            assert resp.json()["status"] == "succeeded"

        async def through_adapter(i: int) -> None:
            action = f"act_sdk_{tag}_{i}"
            call = ActionCall(action, f"key_{action}", payload, scope="s", tool="charge_card", tenant="bench")
            await adapter.execute(call)

        paths = [
            Path("raw aiohttp POST + json", raw),
            Path("StripeAdapter.execute", through_adapter),
            Path("raw httpx POST + json", raw_httpx),
        ]
        results = await measure(paths, n, rounds)
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            await paths[1].round(min(n, 1000))
            profiler.disable()
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out).sort_stats("tottime")
            stats.print_stats(25)
            stats.sort_stats("cumulative").print_stats(
                "effectgate|stripe/_(http_client|api_requestor|encode|util|stripe_object)", 30
            )
            report = out.getvalue()
    finally:
        await adapter.close()
        await http.aclose()
        await session.close()
        proc.terminate()
        proc.wait(10)
    return results, report


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m effectgate_lab.adapter_bench", description=__doc__)
    parser.add_argument("--n", type=int, default=2000, help="calls per path (bounded: at most 20000)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds of n/rounds calls per path")
    parser.add_argument("--profile", action="store_true", help="then profile 1000 adapter calls")
    args = parser.parse_args()
    results, report = asyncio.run(run(min(max(args.n, 10), 20000), max(args.rounds, 1), args.profile))
    print(f"{'path':28} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/call':>12}")
    for r in results:
        print(f"{r.name:28} {r.p50_ms:8.3f} {r.p99_ms:8.3f} {r.cpu_us:12.0f}")
    raw, sdk, _ = results
    print(
        f"adapter overhead: {sdk.p50_ms - raw.p50_ms:+.3f} ms p50, {sdk.cpu_us - raw.cpu_us:+.0f} us CPU per call "
        f"({sdk.cpu_us / raw.cpu_us:.2f}x the raw client's CPU)"
    )
    if report:
        print(report)


if __name__ == "__main__":
    main()
