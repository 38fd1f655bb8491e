"""The operator console in Debian's Chromium (Playwright), against a real `effectgate serve`, the
Stripe simulator and `effectgate console`: sign-in, approve and deny with the agent's answers and
the effects counted at the simulator, an UNKNOWN reconciled and audited, the live inbox, the
observer, CSRF, and agent text rendered as text. The money, the phone layout and the screenshots
in docs/images/ are tests/test_console_money.py's."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Dialog, Page, async_playwright, expect

from effectgate.client import EffectGateClient, InFlight, State, run, step, subagent
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb
from tests.console_kit import CHROMIUM, CHROMIUM_ARGS, TOKENS, ConsoleProcess, Stack, stack
from tests.notify_kit import until
from tests.test_execute import effects

# One event loop for the module: the browser is started once for all its tests (a Playwright
# driver and a Chromium cost over a second of CPU per start). Every test signs in through a new
# browser context of its own (cookies and storage are per context) against a stack of its own.
pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium (make test-services)"),
    pytest.mark.asyncio(loop_scope="module"),
]
WAIT = 20_000  # ms: Playwright's auto-waiting bound for every expectation
HOSTILE = "<img src=x onerror=alert(1)>"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        found = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield found
        await found.close()


@pytest_asyncio.fixture(loop_scope="module")
async def browser(chromium: Browser) -> AsyncIterator[Browser]:
    """The module's browser; the contexts a test opened are closed after it (no page of one test,
    e.g. a live inbox, runs on into the next)."""
    yield chromium
    for context in chromium.contexts:
        await context.close()


@pytest_asyncio.fixture(loop_scope="module")
async def eg(tmp_path: Path) -> AsyncIterator[Stack]:
    async with stack(tmp_path) as s:
        yield s


def card(customer: str, amount: int) -> ChargeCard:
    return ChargeCard(customer=customer, amount=amount, currency="eur", payment_method="pm_card_visa")


async def execute(agent: EffectGateClient, run_id: str, payload: ChargeCard, tool: str = "charge_card") -> pb.Action:
    """One Execute. An IN_FLIGHT answer (the call's window ended before its action settled, as on
    a loaded machine) is called again with the same context, as the docs tell an agent to."""
    for attempt in range(20):
        try:
            with run(run_id), step("charge"), subagent("billing-agent"):
                return (await agent.execute(tool, payload, scope=f"order:{run_id[:40]}")).action
        except InFlight:
            if attempt == 19:
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("unreachable")


async def settled(agent: EffectGateClient, run_id: str, payload: ChargeCard) -> pb.Action:
    """The agent calling again with the same context until the action is settled."""
    loop = asyncio.get_running_loop()
    end = loop.time() + 30
    while True:
        action = await execute(agent, run_id, payload)
        if State.settled(action.state) or loop.time() > end:
            return action
        await asyncio.sleep(0.1)


async def sign_in(browser: Browser, eg: Stack, who: str) -> Page:
    page = await (await browser.new_context(base_url=eg.console)).new_page()
    await page.goto("/inbox")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible(timeout=WAIT)
    await page.get_by_label("Token").fill(TOKENS[who])
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Inbox")).to_be_visible(timeout=WAIT)
    return page


async def decide(page: Page, action_id: str, verb: str, note: str, label: str) -> None:
    await page.goto(f"/actions/{action_id}")
    await page.get_by_label(label).fill(note)
    await page.get_by_role("button", name=verb, exact=True).click()
    await expect(page.get_by_role("heading", name=f"Confirm: {verb}")).to_be_visible(timeout=WAIT)
    await page.get_by_role("button", name=f"Yes, {verb.lower()}").click()
    await expect(page.get_by_role("status")).to_contain_text("Done", timeout=WAIT)


async def test_approve_sends_once_and_deny_sends_nothing(browser: Browser, eg: Stack) -> None:
    page = await sign_in(browser, eg, "alice")
    waiting = await execute(eg.agent, "run-approve", card("cus_console_approve", 4200))
    assert waiting.state == State.AWAITING_APPROVAL
    other = await execute(eg.agent, "run-deny", card("cus_console_deny", 9900))
    await page.goto("/inbox")
    row = page.get_by_role("listitem").filter(has_text="order:run-approve")
    await expect(row).to_contain_text("AWAITING_APPROVAL", timeout=WAIT)
    await expect(row).to_contain_text("€42.00")
    await row.get_by_role("link").first.click()
    # What the approver sees: the amount and the customer (payment_method masked by the gateway),
    # the payload as typed JSON (the amount an integer of minor units).
    payload = page.get_by_label("Payload (sensitive fields masked by the gateway)")
    await expect(payload).to_contain_text('"amount": 4200,', timeout=WAIT)
    await expect(payload).to_contain_text('"customer": "cus_console_approve"')
    await expect(payload).to_contain_text('"payment_method": "***"')

    await decide(page, waiting.action_id, "Approve", "checked the order", "Note for the approval")
    done = await settled(eg.agent, "run-approve", card("cus_console_approve", 4200))
    assert done.state == State.CONFIRMED
    assert len(effects(eg.sim)) == 1

    await decide(page, other.action_id, "Deny", "wrong customer", "Note for the denial (the agent reads it)")
    denied = await settled(eg.agent, "run-deny", card("cus_console_deny", 9900))
    assert denied.state == State.REJECTED and denied.reason == "denied by alice: wrong customer"
    assert len(effects(eg.sim)) == 1  # the approved one only: the denied one sent nothing


async def test_an_unknown_action_is_reconciled_with_a_note_and_audited(browser: Browser, eg: Stack) -> None:
    eg.sim.settle_seconds = 60  # the intent stays processing: the gateway cannot prove it
    eg.sim.injector.script(["partial"])
    unknown = await execute(eg.agent, "run-unknown", card("cus_console_unknown", 1500), tool="charge_direct")
    assert unknown.state == State.UNKNOWN
    # Under load the request can reach the simulator after the 0.5 s attempt timed out and the
    # UNKNOWN answer came (pair U2): the effect is there once it lands.
    (landed, *_) = await until(lambda: effects(eg.sim), "the partial intent at the simulator")
    external_id = landed["id"]
    page = await sign_in(browser, eg, "alice")
    unknown_card = page.get_by_role("listitem").filter(has_text="order:run-unknown")
    await expect(unknown_card).to_contain_text("UNKNOWN", timeout=WAIT)
    await page.goto(f"/actions/{unknown.action_id}")
    await page.get_by_label("CONFIRMED: the effect exists").check()
    await page.get_by_label("External id (the provider's id of the effect, if found)").fill(external_id)
    await page.get_by_label("Note for the reconciliation (your evidence)").fill("seen in the dashboard")
    await page.get_by_role("button", name="Reconcile", exact=True).click()
    await expect(page.get_by_role("status")).to_contain_text(external_id, timeout=WAIT)
    await page.get_by_role("button", name="Yes, reconcile").click()
    await expect(page.get_by_role("status")).to_contain_text("Done", timeout=WAIT)
    await expect(page.get_by_text(external_id).first).to_be_visible()
    assert (await eg.agent.get(unknown.action_id)).state == State.CONFIRMED

    await page.get_by_role("link", name="Audit").click()
    await page.get_by_label("Act").select_option("reconcile")
    await page.get_by_role("button", name="Filter").click()
    act = page.get_by_role("row").filter(has_text=unknown.action_id)
    await expect(act).to_contain_text("alice", timeout=WAIT)
    await expect(act).to_contain_text("seen in the dashboard")
    await expect(act).to_contain_text("CONFIRMED")
    await expect(act).to_contain_text(f"€15.00 went through ({external_id}); to cus_console_unknown")
    assert len(effects(eg.sim)) == 1


async def test_the_inbox_shows_a_new_action_without_a_reload(browser: Browser, eg: Stack) -> None:
    page = await sign_in(browser, eg, "alice")
    await expect(page.locator("#live")).to_have_text("live", timeout=WAIT)  # the watch has started
    await page.evaluate("window.sameDocument = true")  # gone if the page were loaded again
    await execute(eg.agent, "run-live", card("cus_console_live", 700))
    await expect(page.get_by_role("listitem").filter(has_text="order:run-live")).to_be_visible(timeout=WAIT)
    assert await page.evaluate("window.sameDocument === true")  # swapped in by htmx, not a reload


async def test_an_observer_sees_no_decisions_and_cannot_post_one(browser: Browser, eg: Stack) -> None:
    waiting = await execute(eg.agent, "run-observed", card("cus_console_observed", 300))
    page = await sign_in(browser, eg, "watcher")
    await page.goto(f"/actions/{waiting.action_id}")
    await expect(page.get_by_text("cus_console_observed", exact=True)).to_be_visible(timeout=WAIT)
    for name in ("Approve", "Deny", "Reconcile", "Grant bypass"):
        await expect(page.get_by_role("button", name=name, exact=True)).to_have_count(0)
    # A POST forged with the observer's session and its valid CSRF token: refused by the console.
    token = await page.locator('input[name="csrftoken"]').first.get_attribute("value")
    assert token
    for path in ("approve", "approve/confirm"):
        answer = await page.request.post(
            f"/actions/{waiting.action_id}/{path}",
            form={"csrftoken": token, "note": "forged"},
            headers={"Origin": eg.console},
        )
        assert answer.status == 403, path
        assert "only operators decide" in await answer.text()
    assert (await eg.agent.get(waiting.action_id)).state == State.AWAITING_APPROVAL
    assert effects(eg.sim) == []


async def test_a_cross_site_post_without_the_csrf_token_is_refused(browser: Browser, eg: Stack) -> None:
    waiting = await execute(eg.agent, "run-csrf", card("cus_console_csrf", 300))
    page = await sign_in(browser, eg, "alice")  # the session cookie is there
    answer = await page.request.post(
        f"/actions/{waiting.action_id}/approve",
        form={"note": "from another site"},
        headers={"Origin": "http://attacker.invalid"},
    )
    assert answer.status == 403
    assert (await eg.agent.get(waiting.action_id)).state == State.AWAITING_APPROVAL
    assert effects(eg.sim) == []


async def test_agent_text_renders_as_text_and_no_dialog_fires(browser: Browser, eg: Stack) -> None:
    hostile = await execute(eg.agent, HOSTILE, card("cus_console_xss", 100))
    page = await sign_in(browser, eg, "alice")
    dialogs: list[Dialog] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog))
    await expect(page.get_by_role("listitem").filter(has_text=f"run {HOSTILE}")).to_be_visible(timeout=WAIT)
    answer = await page.goto(f"/actions/{hostile.action_id}")
    assert answer is not None and "script-src 'self'" in answer.headers["content-security-policy"]
    await expect(page.get_by_text(HOSTILE, exact=True).first).to_be_visible(timeout=WAIT)
    assert await page.locator("main img").count() == 0
    await page.goto("/actions?run=" + HOSTILE)
    await expect(page.get_by_role("cell", name=HOSTILE, exact=True)).to_be_visible(timeout=WAIT)
    assert await page.locator("main img").count() == 0
    assert dialogs == []


async def test_every_page_works_without_javascript(browser: Browser, eg: Stack) -> None:
    waiting = await execute(eg.agent, "run-nojs", card("cus_console_nojs", 800))
    page = await (await browser.new_context(base_url=eg.console, java_script_enabled=False)).new_page()
    await page.goto("/inbox")
    await page.get_by_label("Token").fill(TOKENS["alice"])
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("listitem").filter(has_text="order:run-nojs")).to_be_visible(timeout=WAIT)
    await page.get_by_role("link", name="Actions").click()
    await page.get_by_label("Run").fill("run-nojs")
    await page.get_by_role("button", name="Search").click()
    await expect(page.get_by_role("cell", name="run-nojs", exact=True)).to_be_visible(timeout=WAIT)
    await decide(page, waiting.action_id, "Deny", "not without a script", "Note for the denial (the agent reads it)")
    assert (await eg.agent.get(waiting.action_id)).state == State.REJECTED


async def test_a_trusted_proxy_names_the_principal(browser: Browser, eg: Stack, tmp_path: Path) -> None:
    names = tmp_path / "principals.toml"
    names.write_text('alice = "CONSOLE_TOKEN_ALICE"\nwatcher = "CONSOLE_TOKEN_WATCHER"\n')
    env = {"CONSOLE_TOKEN_ALICE": TOKENS["alice"], "CONSOLE_TOKEN_WATCHER": TOKENS["watcher"]}
    extra = ("--proxy-header", "X-Remote-User", "--proxy-principals", str(names))
    console = ConsoleProcess(eg.gateway.target, *extra, env=env)
    try:
        url = await console.ready()
        for who, role in (("alice", "operator"), ("watcher", "observer")):
            context = await browser.new_context(base_url=url, extra_http_headers={"X-Remote-User": who})
            page = await context.new_page()
            await page.goto("/inbox")
            await expect(page.get_by_text(f"Signed in as {who} ({role})")).to_be_visible(timeout=WAIT)
            await context.close()
        stranger = await (
            await browser.new_context(base_url=url, extra_http_headers={"X-Remote-User": "eve"})
        ).new_page()
        answer = await stranger.goto("/inbox")
        assert answer is not None and answer.status == 401
    finally:
        console.stop()
