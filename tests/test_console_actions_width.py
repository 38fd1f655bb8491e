"""The console's Actions page (the searchable table of every action) in Debian's Chromium, signed in
as an operator with a dozen actions in four states: no sideways scrolling at 1280 px (a desktop) nor
at 390 px (a phone), no state badge broken inside a word, every row's link to its action reachable
on screen, even beside names that are one 80-character word. Screenshots of both widths go to the
test's temporary folder (docs/images/ with EFFECTGATE_WRITE_SCREENSHOTS=1, as in
tests/test_console_money.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from effectgate.client import State
from effectgate.console.wrap import wrappable
from effectgate.tools.v1.tools_pb2 import ChargeCard
from tests import test_console
from tests.console_kit import CHROMIUM, Stack
from tests.test_console import WAIT, sign_in
from tests.test_console_money import DESKTOP, PHONE, charge, images, split_badges, width

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium (make test-services)")

chromium = test_console.chromium
browser = test_console.browser
eg = test_console.eg

# (run, step, customer, amount, currency, method, tool, description): what a busy morning leaves.
ACTIONS = [
    ("run-2040", "deposit", "cus_marta_ruiz", 12500, "eur", "pm_card_visa", "charge_card", "Deposit, booking #1093"),
    ("run-2040", "card-fee", "cus_marta_ruiz", 5000, "usd", "pm_card_visa", "charge_card", "Card fee, booking #1093"),
    ("run-2040", "tax", "cus_marta_ruiz", 990, "eur", "pm_card_visa", "charge_direct", "Tourist tax"),
    ("run-2041", "room", "cus_kenji_sato", 5000, "jpy", "pm_card_visa", "charge_card", "Room, booking #1101"),
    ("run-2041", "breakfast", "cus_kenji_sato", 2400, "jpy", "pm_card_mastercard", "charge_direct", "Breakfast x2"),
    (
        "run-2042-reconcile-overnight-batch",
        "invoice-0001",
        "cus_acme_holdings_international_gmbh",
        1234567,
        "eur",
        "pm_card_visa",
        "charge_card",
        "Invoice 0001, consulting, November",
    ),
    (
        "run-2042-reconcile-overnight-batch",
        "invoice-0002",
        "cus_acme_holdings_international_gmbh",
        98000,
        "usd",
        "pm_card_amex",
        "charge_direct",
        "Invoice 0002",
    ),
    ("run-2043", "declined", "cus_lena_fischer", 4200, "eur", "pm_card_chargeDeclined", "charge_direct", "Late fee"),
    ("run-2044", "upgrade", "cus_omar_haddad", 15900, "usd", "pm_card_visa", "charge_card", "Suite upgrade"),
    ("run-2044", "spa", "cus_omar_haddad", 8900, "usd", "pm_card_visa", "charge_card", "Spa"),
    ("run-2045", "parking", "cus_ines_moreau", 3000, "eur", "pm_card_visa", "charge_direct", "Parking, 2 nights"),
    ("run-2046", "minibar", "cus_aiko_tanaka", 1800, "jpy", "pm_card_visa", "charge_card", "Minibar"),
    # The attack: names that are one long word each (an agent chooses them, the page must hold them).
    ("run-" + "9f3a" * 24, "s" * 60, "cus_" + "Q" * 80, 700, "usd", "pm_card_visa", "charge_card", "Long names"),
]


async def links_on_screen(page: Page, viewport_width: int) -> list[str]:
    """The action links whose right edge lies beyond the viewport (unreachable without scrolling)."""
    found: list[str] = await page.evaluate(
        "w => [...document.querySelectorAll('table a.id')]"
        ".filter(a => a.getBoundingClientRect().right > w).map(a => a.textContent)",
        viewport_width,
    )
    return found


@pytest.mark.asyncio(loop_scope="module")  # test_console's browser and stack fixtures' loop
async def test_the_actions_page_fits_1280_and_390_px(browser: Browser, eg: Stack, tmp_path: Path) -> None:
    pictures = images(tmp_path)
    states = set()
    for run_id, step_id, customer, amount, currency, method, tool, description in ACTIONS:
        payment = ChargeCard(
            customer=customer, amount=amount, currency=currency, payment_method=method, description=description
        )
        states.add((await charge(eg.agent, run_id, step_id, payment, tool=tool)).state)
    assert {State.AWAITING_APPROVAL, State.CONFIRMED, State.REJECTED} <= states

    page = await sign_in(browser, eg, "alice")
    await page.set_viewport_size(DESKTOP)
    await page.goto("/actions")
    rows = page.get_by_role("table").locator("tbody tr")
    await expect(rows).to_have_count(len(ACTIONS), timeout=WAIT)
    await expect(rows.filter(has_text="cus_acme_holdings_international_gmbh").first).to_contain_text("€12,345.67")
    await page.screenshot(path=str(pictures / "console-actions.png"), full_page=True)
    assert await width(page) <= DESKTOP["width"], "the Actions page scrolls sideways on a 1280 px desktop"
    assert await links_on_screen(page, DESKTOP["width"]) == []
    assert await split_badges(page) == []

    await page.set_viewport_size(PHONE)
    await page.screenshot(path=str(pictures / "console-actions-390.png"), full_page=True)
    assert await width(page) <= PHONE["width"], "the Actions page scrolls sideways on a phone"
    assert await links_on_screen(page, PHONE["width"]) == []
    assert await split_badges(page) == []


def test_names_wrap_at_their_seams_and_stay_text() -> None:
    assert wrappable("booking:invoice-0001") == "booking:<wbr>invoice-<wbr>0001"
    assert wrappable("Q" * 40) == "QQQQQQQQQQQQQQQQ<wbr>QQQQQQQQQQQQQQQQ<wbr>QQQQQQQQ"
    assert wrappable("short") == "short"
    assert wrappable("<img src=x onerror=alert(1)>") == "&lt;img src=x onerr<wbr>or=alert(1)&gt;"
    assert wrappable("a_<b>") == "a_<wbr>&lt;b&gt;"
