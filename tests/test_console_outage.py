"""Outage is outage, in the console (`effectgate console` in a child process, a real `effectgate
serve` stopped and started again, Debian's Chromium for the live inbox): sign-in against a
gateway that cannot be reached is 503 "cannot reach the gateway at …" and makes no session;
while it is down every page, "Yes, approve" included, is 503 with that text (never 409
"refused"), nothing is decided; the open inbox says "offline — reconnecting" and is live again by
itself; the console logs one line when the outage starts and one when it ends, no traceback.
Failed sign-ins are limited per browser address and per token digest, and each refusal is logged
with the browser's address (the forwarded one only with --trusted-proxy)."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, async_playwright, expect

from effectgate.client import EffectGateClient, State
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.console_kit import CHROMIUM, CHROMIUM_ARGS, TOKENS, ConsoleProcess, principals, stack
from tests.harness import API_KEY, GatewayProcess, config_doc, stripe_tools, wait_for_line
from tests.ports import closed_port
from tests.test_console import WAIT, card, execute
from tests.test_console_http import csrf
from tests.test_execute import effects


def lines(console: ConsoleProcess, needle: str) -> list[str]:
    return [line for line in console.output if needle in line]


async def until(check: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        assert loop.time() < end, what
        await asyncio.sleep(0.05)


async def sign_in_over_http(web: httpx.AsyncClient, origin: str, token: str, **headers: str) -> httpx.Response:
    page = await web.get("/login", headers=headers)
    return await web.post(
        "/login", data={"token": token, "csrftoken": csrf(page)}, headers={"Origin": origin, **headers}
    )


async def test_sign_in_against_an_unreachable_gateway_is_503_and_makes_no_session() -> None:
    with closed_port() as nothing:  # held: nobody else listens there meanwhile
        target = f"127.0.0.1:{nothing}"
        console = ConsoleProcess(target)
        try:
            url = await console.ready()
            async with httpx.AsyncClient(base_url=url) as web:
                for _ in range(3):
                    answer = await sign_in_over_http(web, url, TOKENS["alice"])
                    assert answer.status_code == 503
                    assert f"Cannot reach the gateway at {target}." in answer.text
                    assert "Signed in" not in answer.text
                inbox = await web.get("/inbox")
                assert inbox.status_code == 303 and inbox.headers["location"].startswith("/login")  # no session
            await until(lambda: lines(console, "cannot reach the gateway"), "the outage is logged")
            assert len(lines(console, "cannot reach the gateway")) == 1  # one line for the outage
            assert not lines(console, "Traceback")
        finally:
            console.stop()


async def test_failed_sign_ins_are_limited_and_logged_with_the_browsers_address(tmp_path: Path) -> None:
    async with stack(tmp_path) as eg:
        plain, proxied = ConsoleProcess(eg.gateway.target), ConsoleProcess(eg.gateway.target, "--trusted-proxy")
        try:
            direct, behind = await plain.ready(), await proxied.ready()
            async with httpx.AsyncClient(base_url=direct) as web:
                codes = [(await sign_in_over_http(web, direct, f"wrong-{i}")).status_code for i in range(11)]
                assert codes == [401] * 10 + [429]
                # The address is held back now, the right token too; the gateway is not asked.
                forged = {"X-Forwarded-For": "203.0.113.9"}
                held = await sign_in_over_http(web, direct, TOKENS["alice"], **forged)
                assert held.status_code == 429 and int(held.headers["retry-after"]) >= 1
            await until(lambda: len(lines(plain, "sign-in refused from")) == 12, "each refusal is logged")
            refusals = lines(plain, "sign-in refused from")
            assert all("from 127.0.0.1:" in r for r in refusals)  # the forwarded address is not trusted here
            assert not [r for r in refusals if "wrong-" in r]  # never the token
            async with httpx.AsyncClient(base_url=behind) as web:
                # Behind a trusted proxy the forwarded address counts; the token's digest counts
                # from any address.
                ok = await sign_in_over_http(web, behind, TOKENS["alice"], **{"X-Forwarded-For": "203.0.113.7"})
                assert ok.status_code == 303
                guesses = []
                for i in range(6):
                    forwarded = {"X-Forwarded-For": f"198.51.100.{i}"}
                    guesses.append((await sign_in_over_http(web, behind, "guess", **forwarded)).status_code)
                assert guesses == [401] * 5 + [429]
            await until(lambda: len(lines(proxied, "sign-in refused from")) == 6, "each refusal is logged")
            addresses = [r.split("sign-in refused from ")[1].split(":")[0] for r in lines(proxied, "sign-in refused")]
            assert addresses == [f"198.51.100.{i}" for i in range(6)]
        finally:
            plain.stop()
            proxied.stop()


async def serving(gateway: GatewayProcess, address: str) -> None:
    """Until the gateway's ready line names `address` (a Unix socket's: no port to read)."""
    await wait_for_line(gateway.proc, f"serving on {re.escape(address)}$", gateway.output, 60, "gateway")


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        found = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield found
        await found.close()


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium (make test-services)")
async def test_a_gateway_stopped_under_an_open_inbox_is_an_outage_and_comes_back(
    browser: Browser, tmp_path: Path
) -> None:
    sim = StripeSimulator(api_key=API_KEY)
    await sim.start()
    # The console keeps the gateway's address across the restart: a Unix socket in the test's own
    # directory, which no other process can take meanwhile (a freed port can be, e.g. by a
    # second suite on the machine).
    address = f"unix:{tmp_path}/gateway.sock"
    doc = config_doc(
        f"sqlite:///{tmp_path}/eg.db",
        principals=principals(),
        listen=address,
        **stripe_tools(sim.base_url, approval="required"),
    )
    config = write_config(doc, tmp_path / "effectgate.toml")
    gateway = GatewayProcess(config)
    console: ConsoleProcess | None = None
    agent: EffectGateClient | None = None
    try:
        await serving(gateway, address)
        agent = EffectGateClient(address, token=TOKENS["bot"])
        console = ConsoleProcess(address)
        url = await console.ready()
        waiting = await execute(agent, "run-outage", card("cus_outage", 1200))
        watcher = await (await browser.new_context(base_url=url)).new_page()
        await watcher.goto("/login")
        await watcher.get_by_label("Token").fill(TOKENS["alice"])
        await watcher.get_by_role("button", name="Sign in").click()
        await expect(watcher.get_by_role("heading", name="Inbox")).to_be_visible(timeout=WAIT)
        await expect(watcher.locator("#live")).to_have_text("live", timeout=WAIT)
        # An approval half-way: its confirmation page is open when the gateway goes.
        approver = await watcher.context.new_page()
        await approver.goto(f"{url}/actions/{waiting.action_id}")
        await approver.get_by_label("Note for the approval").fill("checked")
        await approver.get_by_role("button", name="Approve", exact=True).click()
        await expect(approver.get_by_role("heading", name="Confirm: Approve")).to_be_visible(timeout=WAIT)

        gateway.kill()
        await expect(watcher.locator("#live")).to_have_text("offline — reconnecting", timeout=WAIT)
        await approver.get_by_role("button", name="Yes, approve").click()
        await expect(approver.get_by_text(f"Cannot reach the gateway at {address}.")).to_be_visible(timeout=WAIT)
        for path in ("/inbox", "/actions", f"/actions/{waiting.action_id}", "/audit"):
            answer = await watcher.request.get(f"{url}{path}", max_redirects=0)
            assert answer.status == 503, path
            assert f"Cannot reach the gateway at {address}." in await answer.text(), path

        gateway = GatewayProcess(config)  # the same address (its killed predecessor's socket file), the same store
        await serving(gateway, address)
        # The agent's channel may still be backing off from the refused connections of the
        # outage (gRPC's reconnect backoff, long on a loaded machine): the agent comes back anew.
        await agent.close()
        agent = EffectGateClient(address, token=TOKENS["bot"])
        await expect(watcher.locator("#live")).to_have_text("live", timeout=WAIT)  # by itself, no reload
        await execute(agent, "run-after", card("cus_after", 300))
        await expect(watcher.get_by_role("listitem").filter(has_text="order:run-after")).to_be_visible(timeout=WAIT)
        assert (await agent.get(waiting.action_id)).state == State.AWAITING_APPROVAL  # nothing was decided
        assert effects(sim) == []
        await until(lambda: lines(console, "answers again"), "the end of the outage is logged")
        assert len(lines(console, "cannot reach the gateway at")) == 1
        assert len(lines(console, "answers again")) == 1
        assert not lines(console, "Traceback")
    finally:
        if agent is not None:
            await agent.close()
        if console is not None:
            console.stop()
        gateway.kill()
        await sim.stop()
