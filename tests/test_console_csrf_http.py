"""The console's CSRF checks over plain HTTP (no browser): a POST must come from the console's own
origin (Origin, else Sec-Fetch-Site: same-origin; neither is refused) and carry the token of its
own server-side session, which a new one replaces at sign-in. Every refusal is 403, nothing is
decided and nothing is sent to the provider."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from effectgate.client import State, run, step
from effectgate.tools.v1.tools_pb2 import ChargeCard
from tests.console_kit import TOKENS, Stack, stack
from tests.test_execute import effects


def csrf(page: httpx.Response) -> str:
    found = re.search(r'name="csrftoken" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


@pytest.fixture
async def eg(tmp_path: Path) -> AsyncIterator[Stack]:
    async with stack(tmp_path) as s:
        yield s


async def signed_in(eg: Stack, who: str = "alice") -> tuple[httpx.AsyncClient, str]:
    """A client signed in as `who`, and the CSRF token its pages carry."""
    web = httpx.AsyncClient(base_url=eg.console)
    login = await web.get("/login")
    answer = await web.post(
        "/login", data={"token": TOKENS[who], "csrftoken": csrf(login)}, headers={"Origin": eg.console}
    )
    assert answer.status_code == 303, answer.text
    inbox = await web.get("/inbox")
    assert inbox.status_code == 200
    return web, csrf(inbox)


async def waiting(eg: Stack, run_id: str) -> str:
    payload = ChargeCard(customer=f"cus_{run_id}", amount=500, currency="eur", payment_method="pm_card_visa")
    with run(run_id), step("charge"):
        action = (await eg.agent.execute("charge_card", payload, scope=f"order:{run_id}")).action
    assert action.state == State.AWAITING_APPROVAL
    return action.action_id


async def test_a_post_from_another_origin_or_from_nowhere_is_refused(eg: Stack) -> None:
    action_id = await waiting(eg, "run-origin")
    web, token = await signed_in(eg)
    port = int(eg.console.rsplit(":", 1)[1])
    form = {"csrftoken": token, "note": "forged"}
    try:
        for headers in (
            {"Origin": f"http://127.0.0.1:{port + 1}"},  # another port of the same host
            {"Origin": "http://evil.127.0.0.1.nip.invalid"},
            {"Origin": f"https://127.0.0.1:{port}"},  # another scheme
            {"Origin": "null"},  # an opaque origin, and no Sec-Fetch-Site
            {"Origin": "null", "Sec-Fetch-Site": "same-site"},
            {"Sec-Fetch-Site": "cross-site"},
            {},  # neither header: refused
        ):
            answer = await web.post(f"/actions/{action_id}/approve", data=form, headers=headers)
            assert answer.status_code == 403, headers
            assert "Nothing was done" in answer.text
        assert (await eg.agent.get(action_id)).state == State.AWAITING_APPROVAL
        # The same form from the console's own origin (or, without Origin, said same-origin) works.
        confirm = await web.post(
            f"/actions/{action_id}/approve/confirm", data=form, headers={"Sec-Fetch-Site": "same-origin"}
        )
        assert confirm.status_code == 200 and "Confirm: Approve" in confirm.text
    finally:
        await web.aclose()
    assert effects(eg.sim) == []


async def test_a_token_of_another_session_is_refused_and_sign_in_rotates_it(eg: Stack) -> None:
    action_id = await waiting(eg, "run-tossed")
    mine = {"Origin": eg.console}
    # The attacker's own sign-in form: a validly made token, bound to the attacker's nonce.
    async with httpx.AsyncClient(base_url=eg.console) as attacker:
        theirs = csrf(await attacker.get("/login"))
    victim = httpx.AsyncClient(base_url=eg.console)
    try:
        before = csrf(await victim.get("/login"))
        assert before != theirs
        answer = await victim.post(
            "/login", data={"token": TOKENS["alice"], "csrftoken": theirs}, headers=mine
        )  # login CSRF with a planted token
        assert answer.status_code == 403
        signed = await victim.post("/login", data={"token": TOKENS["alice"], "csrftoken": before}, headers=mine)
        assert signed.status_code == 303
        after = csrf(await victim.get("/inbox"))
        assert after != before  # rotated at sign-in
        for stale in (before, theirs, after[:-1], ""):
            answer = await victim.post(
                f"/actions/{action_id}/approve", data={"csrftoken": stale, "note": "forged"}, headers=mine
            )
            assert answer.status_code == 403, stale
        # Another operator's session token does not work in this session either.
        other, other_token = await signed_in(eg)
        await other.aclose()
        answer = await victim.post(
            f"/actions/{action_id}/approve", data={"csrftoken": other_token, "note": "forged"}, headers=mine
        )
        assert answer.status_code == 403
        assert (await eg.agent.get(action_id)).state == State.AWAITING_APPROVAL
        ok = await victim.post(
            f"/actions/{action_id}/deny/confirm", data={"csrftoken": after, "note": "checked"}, headers=mine
        )
        assert ok.status_code == 200
        # A JSON or multipart body carries no form token: refused.
        answer = await victim.post(
            f"/actions/{action_id}/approve", json={"csrftoken": after, "note": "x"}, headers=mine
        )
        assert answer.status_code == 403
    finally:
        await victim.aclose()
    assert "csrftoken" not in (await httpx.AsyncClient(base_url=eg.console).get("/login")).headers.get("set-cookie", "")
    assert effects(eg.sim) == []
