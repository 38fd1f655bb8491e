"""Money as money in the console, in Debian's Chromium: amounts in usd, eur and jpy rendered from
minor units in the reader's locale, the inbox's cards saying what is asked, the action page's
opening sentence and the run's other actions, no horizontal scrolling at 390 px and no word broken
inside at 1280 px. The screenshots in docs/images/ are taken here at both widths (rewritten only
with EFFECTGATE_WRITE_SCREENSHOTS=1: otherwise every run would leave the work tree changed)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, ViewportSize, expect

from effectgate.client import EffectGateClient, State, run, step, subagent
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb
from tests import test_console
from tests.console_kit import CHROMIUM, TOKENS, Stack
from tests.test_console import WAIT, sign_in

# On the module's event loop, like test_console, whose browser and stack fixtures these are.
pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium (make test-services)"),
    pytest.mark.asyncio(loop_scope="module"),
]

chromium = test_console.chromium
browser = test_console.browser
eg = test_console.eg
DOCS_IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
PHONE = ViewportSize(width=390, height=844)
DESKTOP = ViewportSize(width=1280, height=900)


def images(tmp: Path) -> Path:
    return DOCS_IMAGES if os.environ.get("EFFECTGATE_WRITE_SCREENSHOTS") == "1" else tmp


async def charge(
    agent: EffectGateClient, run_id: str, step_id: str, payment: ChargeCard, tool: str = "charge_card"
) -> pb.Action:
    with run(run_id), step(step_id), subagent("billing-agent"):
        return (await agent.execute(tool, payment, scope=f"booking:{step_id}")).action


def pay(customer: str, amount: int, currency: str, description: str) -> ChargeCard:
    return ChargeCard(
        customer=customer, amount=amount, currency=currency, payment_method="pm_card_visa", description=description
    )


async def width(page: Page) -> int:
    found: int = await page.evaluate("document.documentElement.scrollWidth")
    return found


async def split_badges(page: Page) -> list[str]:
    """State badges laid out on more than one line (a word broken inside: "AWAITING_A PPROVAL")."""
    found: list[str] = await page.evaluate(
        "[...document.querySelectorAll('.state')].filter(e => e.getClientRects().length > 1).map(e => e.textContent)"
    )
    return found


async def test_money_reads_as_money_at_1280_and_390_px(browser: Browser, eg: Stack, tmp_path: Path) -> None:
    pictures = images(tmp_path)
    marta = "cus_marta_ruiz"
    deposit = await charge(eg.agent, "run-2040", "deposit", pay(marta, 12500, "eur", "Deposit, booking #1093"))
    await charge(eg.agent, "run-2040", "card-fee", pay(marta, 5000, "usd", "Card fee, booking #1093"))
    direct = await charge(eg.agent, "run-2040", "tax", pay(marta, 990, "eur", "Tourist tax"), tool="charge_direct")
    assert direct.state == State.CONFIRMED
    room = await charge(eg.agent, "run-2041", "room", pay("cus_kenji_sato", 5000, "jpy", "Room, booking #1101"))
    assert deposit.state == room.state == State.AWAITING_APPROVAL

    page = await sign_in(browser, eg, "alice")
    await page.set_viewport_size(DESKTOP)
    cards = page.get_by_role("list", name="Actions awaiting approval or UNKNOWN").get_by_role("listitem")
    await expect(cards).to_have_count(3, timeout=WAIT)
    eur, usd, jpy = (cards.filter(has_text=step) for step in ("booking:deposit", "booking:card-fee", "booking:room"))
    await expect(eur).to_contain_text("billing-agent asks to charge €125.00 to cus_marta_ruiz: Deposit, booking #1093")
    await expect(eur).to_contain_text("Approve sends €125.00 to cus_marta_ruiz, once.")
    await expect(eur).to_contain_text("run-2040")
    await expect(usd.locator(".money")).to_have_text("$50.00")
    await expect(jpy.locator(".money")).to_have_text("¥5,000")  # zero-decimal: never ¥50.00
    assert await split_badges(page) == []
    assert await width(page) <= DESKTOP["width"]
    await page.screenshot(path=str(pictures / "console-inbox.png"), full_page=True)
    await page.set_viewport_size(PHONE)
    assert await width(page) <= PHONE["width"], "the inbox scrolls sideways on a phone"
    await page.screenshot(path=str(pictures / "console-inbox-390.png"), full_page=True)

    await page.set_viewport_size(DESKTOP)
    await eur.get_by_role("link").click()
    heading = page.get_by_role("heading", level=1)
    sentence = r"^billing-agent asks to charge €125\.00 to cus_marta_ruiz: Deposit, booking #1093 — run-2040, \d+s ago$"
    await expect(heading).to_have_text(re.compile(sentence), timeout=WAIT)
    others = page.get_by_role("list", name="The other actions of the run").get_by_role("listitem")
    await expect(others).to_have_count(2)
    await expect(others.filter(has_text="$50.00")).to_contain_text("AWAITING_APPROVAL")
    await expect(others.filter(has_text="€9.90")).to_contain_text("€9.90 went through")
    payload = page.get_by_label("Payload (sensitive fields masked by the gateway)")
    await expect(payload).to_contain_text('"amount": 12500,')  # an integer, never 12500.0
    assert "12500.0" not in await page.content()
    assert await split_badges(page) == []
    assert await width(page) <= DESKTOP["width"]
    await page.screenshot(path=str(pictures / "console-action.png"), full_page=True)
    await page.set_viewport_size(PHONE)
    assert await width(page) <= PHONE["width"], "the action page scrolls sideways on a phone"
    await page.screenshot(path=str(pictures / "console-action-390.png"), full_page=True)

    # The confirmed one's story: its numbers typed (no `{"attempt": 0.0}`), its money shown.
    await page.goto(f"/actions/{direct.action_id}")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("€9.90", timeout=WAIT)
    assert not re.search(r"\d\.0\b", await page.locator("ol.timeline").inner_text())
    assert await width(page) <= PHONE["width"]

    # Another reader's locale: the same amounts as a German reader writes them.
    context = await browser.new_context(base_url=eg.console, locale="de-DE", viewport=PHONE)
    german = await context.new_page()
    await german.goto("/inbox")
    await german.get_by_label("Token").fill(TOKENS["alice"])
    await german.get_by_role("button", name="Sign in").click()
    await expect(german.locator(".money").filter(has_text="€")).to_have_text("125,00\xa0€", timeout=WAIT)
    await expect(german.locator(".money").filter(has_text="¥")).to_have_text("5.000\xa0¥")
    assert await width(german) <= PHONE["width"]
    await context.close()
