"""The console's browser tests' parts: a real `effectgate serve` with an agent, an operator and an
observer, the Stripe simulator, `effectgate console` in a child process, and Debian's Chromium
driven by Playwright (never a downloaded browser)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effectgate.client import EffectGateClient
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.gateway_forks import popen_gateway
from tests.harness import API_KEY, GatewayProcess, config_doc, stripe_tools, wait_for_line

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TOKENS = {"bot": "console-bot-token", "alice": "console-alice-token", "watcher": "console-watcher-token"}
ROLES = {"bot": ["agent"], "alice": ["operator"], "watcher": ["observer"]}


def principals() -> list[dict[str, Any]]:
    return [
        {"name": n, "tenant": "acme", "token_sha256": hashlib.sha256(t.encode()).hexdigest(), "roles": ROLES[n]}
        for n, t in TOKENS.items()
    ]


class ConsoleProcess:
    """`effectgate console` on port 0, talking to the gateway at `target`."""

    def __init__(self, target: str, *extra: str, env: dict[str, str] | None = None) -> None:
        child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        # A fork of the test's gateway driver (tests/gateway_forks.py).
        self.proc = popen_gateway(["console", "--target", target, "--port", "0", *extra], child_env)
        self.url = ""
        self.output: list[str] = []

    async def ready(self, timeout: float = 30.0) -> str:
        found = await wait_for_line(self.proc, r"console listening on (\S+)", self.output, timeout, "console")
        self.url = found.group(1)
        return self.url

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@dataclass
class Stack:
    sim: StripeSimulator
    gateway: GatewayProcess
    agent: EffectGateClient
    console: str  # the console's base URL


@asynccontextmanager
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    sim = StripeSimulator(api_key=API_KEY, search_lag=0.2)
    await sim.start()
    tools = stripe_tools(sim.base_url, approval="required")
    # A second tool without approval and with short deadlines: a partial effect leaves it UNKNOWN.
    tools["tools"]["charge_direct"] = {**tools["tools"]["charge_card"], "deadline": "1s", "attempt_timeout": "0.5s"}
    tools["tools"]["charge_direct"].pop("approval")
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", principals=principals(), **tools)
    gateway = GatewayProcess(write_config(doc, tmp_path / "effectgate.toml"))
    console: ConsoleProcess | None = None
    agent: EffectGateClient | None = None
    try:
        await gateway.ready()
        console = ConsoleProcess(gateway.target)
        url = await console.ready()
        agent = EffectGateClient(gateway.target, token=TOKENS["bot"])
        yield Stack(sim, gateway, agent, url)
    finally:
        if agent is not None:
            await agent.close()
        if console is not None:
            console.stop()
        gateway.kill()
        await sim.stop()
