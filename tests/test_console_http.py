"""The console over HTTP(S) without a browser: its cookies (a signed session id only; HttpOnly,
SameSite=Strict, Secure under TLS), sign-out, and the refusals that need no page."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import httpx

from tests.console_kit import TOKENS, ConsoleProcess, stack
from tests.tls_certs import make_pki


def csrf(page: httpx.Response) -> str:
    found = re.search(r'name="csrftoken" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


async def test_https_sessions_hold_only_a_secure_httponly_strict_id(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    async with stack(tmp_path) as eg:
        console = ConsoleProcess(
            eg.gateway.target, "--cert-file", str(pki.server_cert), "--key-file", str(pki.server_key)
        )
        try:
            url = await console.ready()
            assert url.startswith("https://127.0.0.1:")
            async with httpx.AsyncClient(base_url=url, verify=ssl.create_default_context(cafile=str(pki.ca))) as web:
                login = await web.get("/login")
                assert login.status_code == 200
                first = login.headers["set-cookie"].lower()  # the sign-in form's nonce, in the session cookie
                assert "secure" in first and "samesite=strict" in first and "httponly" in first
                mine = {"Origin": url}
                refused = await web.post("/login", data={"token": TOKENS["alice"]}, headers=mine)  # no CSRF token
                assert refused.status_code == 403
                signed = await web.post(
                    "/login", data={"token": TOKENS["alice"], "csrftoken": csrf(login)}, headers=mine
                )
                assert signed.status_code == 303
                cookie = next(
                    v for k, v in signed.headers.multi_items() if k == "set-cookie" and "effectgate_console" in v
                )
                assert TOKENS["alice"] not in cookie  # the token stays on the server
                attributes = cookie.lower()
                assert "httponly" in attributes and "samesite=strict" in attributes and "secure" in attributes
                inbox = await web.get("/inbox")
                assert inbox.status_code == 200 and "Signed in with an operator's token" in inbox.text
                out = await web.post("/logout", data={"csrftoken": csrf(inbox)}, headers=mine)
                assert out.status_code == 303
                after = await web.get("/inbox")
                assert after.status_code == 303 and after.headers["location"].startswith("/login")
        finally:
            console.stop()


async def test_an_agent_token_or_an_unknown_one_cannot_sign_in(tmp_path: Path) -> None:
    async with stack(tmp_path) as eg, httpx.AsyncClient(base_url=eg.console) as web:
        for token in (TOKENS["bot"], "no-such-token"):
            page = await web.get("/login")
            answer = await web.post(
                "/login", data={"token": token, "csrftoken": csrf(page)}, headers={"Origin": eg.console}
            )
            assert answer.status_code == 401, token
            assert "effectgate_console" not in answer.headers.get("set-cookie", "")
