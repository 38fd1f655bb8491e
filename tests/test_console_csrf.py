"""CSRF against the console in Debian's Chromium: a page served from another port of the same
host (the same site, so SameSite=Strict cookies go along) posts an approval with the operator's
session, first with whatever CSRF token it can read or toss into the browser, then with a token
the attacker fetched from the console's own sign-in form and planted as a cookie. Both are refused
(403, the action still waits, nothing at the provider), and the operator's own forms still work."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from aiohttp import web
from playwright.async_api import Browser, Page, expect

from effectgate.client import State
from tests import test_console
from tests.console_kit import CHROMIUM, Stack
from tests.test_console import WAIT, card, decide, execute, settled, sign_in
from tests.test_execute import effects

# On the module's event loop, like test_console, whose browser and stack fixtures these are.
pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium (make test-services)"),
    pytest.mark.asyncio(loop_scope="module"),
]

# The attacker's page: reads what cookies it can, plants one if told, and posts the console's
# approval form with the token it found. No CSP: it is the attacker's own page.
ATTACK = """<!doctype html><html><head>{meta}<title>cute cats</title></head><body>
<script>
window.attack = function (target, action, planted, token) {{
  if (planted) {{ for (const c of planted.split("\\n")) {{ document.cookie = c; }} }}
  const read = (document.cookie.match(/(?:^|; )csrftoken=([^;]*)/) || [])[1];
  const form = document.createElement("form");
  form.method = "post";
  form.action = target + "/actions/" + action + "/approve";
  for (const [k, v] of [["csrftoken", token || read || ""], ["note", "from another port"]]) {{
    const input = document.createElement("input");
    input.type = "hidden"; input.name = k; input.value = v; form.appendChild(input);
  }}
  document.body.appendChild(form);
  form.submit();
}};
</script></body></html>"""


# The console tests' Chromium and gateway stack (one definition of each, in test_console).
chromium = test_console.chromium
browser = test_console.browser
eg = test_console.eg


@pytest_asyncio.fixture(loop_scope="module")
async def attacker() -> AsyncIterator[str]:
    """The attacker's site: another port of 127.0.0.1."""

    async def page(request: web.Request) -> web.Response:
        meta = '<meta name="referrer" content="no-referrer">' if request.query.get("hide") else ""
        return web.Response(text=ATTACK.format(meta=meta), content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def attack(
    page: Page, site: str, eg: Stack, action_id: str, planted: str = "", token: str = "", hide: bool = False
) -> int:
    """The operator's browser opens the attacker's page, which posts the approval; the status of
    the page the browser lands on."""
    await page.goto(site + ("/?hide=1" if hide else "/"))
    async with page.expect_navigation(url=f"**/actions/{action_id}/approve", timeout=WAIT) as landed:
        await page.evaluate("([t, a, p, k]) => window.attack(t, a, p, k)", [eg.console, action_id, planted, token])
    answer = await landed.value
    assert answer is not None
    return answer.status


async def test_a_page_on_another_port_cannot_approve(browser: Browser, eg: Stack, attacker: str) -> None:
    waiting = await execute(eg.agent, "run-cross-port", card("cus_cross_port", 4100))
    page = await sign_in(browser, eg, "alice")
    # What the attacker's page can read: no session id, no token (HttpOnly, and no token cookie).
    await page.goto(attacker)
    assert await page.evaluate("document.cookie") == ""
    # 1. The plain forgery (Origin: the attacker's port), 2. the same with Origin hidden (null).
    for hide in (False, True):
        assert await attack(page, attacker, eg, waiting.action_id, hide=hide) == 403
        await expect(page.get_by_text("Nothing was done")).to_be_visible(timeout=WAIT)
    # 3. Cookie tossing: the attacker's own sign-in form gives a validly made token and the cookie
    # it is bound to; the page plants that cookie (and an old-style token cookie) and posts it.
    async with httpx.AsyncClient(base_url=eg.console) as own:
        login = await own.get("/login")
        token = re.search(r'name="csrftoken" value="([^"]+)"', login.text)
        assert token
        cookie = own.cookies["effectgate_console"]
    planted = "\n".join([f"effectgate_console={cookie}; path=/actions", f"csrftoken={token.group(1)}; path=/"])
    assert await attack(page, attacker, eg, waiting.action_id, planted, token.group(1)) == 403
    assert (await eg.agent.get(waiting.action_id)).state == State.AWAITING_APPROVAL
    assert effects(eg.sim) == []

    # The console's own form in the same browser still approves, once.
    await page.context.clear_cookies()
    page = await sign_in(browser, eg, "alice")
    await decide(page, waiting.action_id, "Approve", "checked by phone", "Note for the approval")
    done = await settled(eg.agent, "run-cross-port", card("cus_cross_port", 4100))
    assert done.state == State.CONFIRMED
    assert len(effects(eg.sim)) == 1


async def test_the_forms_work_without_javascript_after_a_refused_forgery(
    browser: Browser, eg: Stack, attacker: str
) -> None:
    waiting = await execute(eg.agent, "run-nojs-csrf", card("cus_nojs_csrf", 900))
    page = await sign_in(browser, eg, "alice")
    assert await attack(page, attacker, eg, waiting.action_id) == 403
    quiet = await (await browser.new_context(base_url=eg.console, java_script_enabled=False)).new_page()
    await quiet.goto("/inbox")
    await quiet.get_by_label("Token").fill("console-alice-token")
    await quiet.get_by_role("button", name="Sign in").click()
    await expect(quiet.get_by_role("heading", name="Inbox")).to_be_visible(timeout=WAIT)
    await decide(quiet, waiting.action_id, "Approve", "no script needed", "Note for the approval")
    done = await settled(eg.agent, "run-nojs-csrf", card("cus_nojs_csrf", 900))
    assert done.state == State.CONFIRMED
    assert len(effects(eg.sim)) == 1
