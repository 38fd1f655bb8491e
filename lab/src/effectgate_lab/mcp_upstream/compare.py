"""A no-key upstream MCP server called directly and through effectgate, side by side.

    python -m effectgate_lab.mcp_upstream.compare --actions 100

Both rounds run the same agent against the lab's issue tracker (`create_issue` takes no key, its
`list_issues` lags 0.3 s) with the same faults on its writes: answers lost after the effect,
restarts, tool errors that applied nothing, rate limits and answers slower than the caller waits.
The direct agent does what MCP hosts do: it calls the tool again when a call fails or times out
(up to 4 calls, a second apart). Through effectgate the agent calls the gateway (an in-process gateway on
127.0.0.1, SQLite in a temporary folder) with the same run context each time. The table counts,
at the tracker's own ledger, the duplicates and the actions with no effect, and the time until
each action is settled (a success answer; through effectgate, CONFIRMED).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
from google.protobuf import json_format, struct_pb2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from effectgate.client import EffectGateClient
from effectgate.client.context import RunContext
from effectgate.gateway.config import parse_config
from effectgate.gateway.runtime import Gateway
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.mcp_upstream.http import McpHttpSimulator

TOKEN = "compare-tracker-token"
TOKEN_ENV = "EG_COMPARE_TRACKER_TOKEN"
FAULTS = ["drop_after_commit", None, "restart", None, "error_no_effect", "rate_limit", None, "slow", None, None]
CONCURRENCY = 10
CALL_TIMEOUT = 2.0
DIRECT_TRIES = 4


def _issue(i: int) -> dict[str, Any]:
    return {"title": f"bug {i}", "body": f"steps {i}", "labels": ["bug"]}


async def _sim() -> McpHttpSimulator:
    sim = McpHttpSimulator("tracker", token=TOKEN, list_lag=0.3, slow_seconds=3.0)
    await sim.start()
    return sim


async def _rounds(n: int, agent: Callable[[int], Awaitable[float | None]]) -> list[float | None]:
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> float | None:
        async with limit:
            return await agent(i)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def direct(n: int) -> tuple[McpHttpSimulator, list[float | None]]:
    sim = await _sim()
    sim.faults.script(FAULTS * (n // len(FAULTS) + 1))

    async def agent(i: int) -> float | None:
        started = time.monotonic()
        for _ in range(DIRECT_TRIES):
            try:
                http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
                transport = streamable_http_client(sim.url, http_client=http)
                async with asyncio.timeout(CALL_TIMEOUT + 5), http, Client(transport, mode="legacy") as client:
                    result = await client.call_tool("create_issue", _issue(i), read_timeout_seconds=CALL_TIMEOUT)
                if not result.is_error:
                    return time.monotonic() - started
            except Exception:  # a lost answer, a restart, a timeout: the host calls again
                pass
            await asyncio.sleep(1.0)
        return None

    return sim, await _rounds(n, agent)


def _config(sim: McpHttpSimulator, workdir: Path) -> dict[str, Any]:
    return {
        "server": {"listen": "127.0.0.1:0"},
        "store": {"url": f"sqlite:///{workdir}/effectgate.db"},
        "gateway": {"lease_ttl": "3s", "reconcile_interval": "0.2s", "recheck_min": "0.2s", "recheck_max": "1s"},
        "adapters": {
            "tracker": {
                "kind": "mcp",
                "url": sim.url,
                "token_env": TOKEN_ENV,
                "tool": "create_issue",
                "arguments": {"title": "{title}", "body": "{body}\n\n[{provider_key}]", "labels": "{labels}"},
                "verify": {"tool": "list_issues", "arguments": {"query": "[{provider_key}]"}},
                "match": "size(result.issues) == 1",
                "absent": "size(result.issues) == 0",
                "no_effect_when": 'result.error in ["unauthorized", "rate_limited"]',
                "retry_after": "result.retry_after",
                "refused_when": 'result.error == "invalid_title"',
                "timeout": 1.5,
                "connect_timeout": 1.0,
                "consistency_window": 2.0,
            }
        },
        "tools": {
            "create_issue": {
                "adapter": "tracker",
                "consistency_window": "2s",
                "attempt_timeout": "2s",
                "deadline": "10s",
                "max_attempts": 8,
            }
        },
    }


async def through(n: int, workdir: Path) -> tuple[McpHttpSimulator, list[float | None]]:
    sim = await _sim()
    sim.faults.script(FAULTS * (n // len(FAULTS) + 1))
    os.environ[TOKEN_ENV] = TOKEN
    gateway = await Gateway.start(parse_config(_config(sim, workdir)))
    client = EffectGateClient.connect(f"127.0.0.1:{gateway.port}")

    async def agent(i: int) -> float | None:
        started = time.monotonic()
        ctx = RunContext(run_id=f"compare-{i}", step_id="step-1", agent="compare")
        payload = json_format.ParseDict(_issue(i), struct_pb2.Struct())
        end = started + 60
        while time.monotonic() < end:
            try:
                answer = await client.execute("create_issue", payload, scope=f"i:{i}", context=ctx, timeout=12)
                if answer.action.state == pb.EFFECT_STATE_CONFIRMED:
                    return time.monotonic() - started
            except Exception:  # in flight, deadline: the same call again later
                pass
            await asyncio.sleep(0.5)
        return None

    try:
        return sim, await _rounds(n, agent)
    finally:
        await client.close()
        await gateway.stop()


def _row(name: str, sim: McpHttpSimulator, n: int, times: list[float | None]) -> str:
    per = Counter(str(e["title"]) for e in sim.effects())
    dups = sum(v - 1 for v in per.values() if v > 1)
    missing = n - len(per)
    done = sorted(t for t in times if t is not None)
    p50 = statistics.median(done) if done else float("nan")
    p95 = done[int(0.95 * (len(done) - 1))] if done else float("nan")
    return (
        f"| {name} | {n} | {len(sim.effects())} | {dups} | {missing} | {len(done)} | "
        f"{p50:.2f} s | {p95:.2f} s | {max(done) if done else float('nan'):.2f} s |"
    )


async def main_async(n: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        sim_d, direct_times = await direct(n)
        await sim_d.close()
        sim_t, through_times = await through(n, Path(tmp))
        await sim_t.close()
    header = (
        "| tracker (no key) | actions | effects | duplicates | no effect | settled | p50 to settle "
        "| p95 | max |\n|---|---|---|---|---|---|---|---|---|"
    )
    return "\n".join([header, _row("direct", sim_d, n, direct_times), _row("via effectgate", sim_t, n, through_times)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m effectgate_lab.mcp_upstream.compare")
    p.add_argument("--actions", type=int, default=100)
    args = p.parse_args(argv)
    print(asyncio.run(main_async(max(1, min(args.actions, 1000)))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
