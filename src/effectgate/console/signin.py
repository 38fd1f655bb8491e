"""Sign-in with a bearer token (kept in the server-side session), and sign-out.

A gateway that cannot be reached is 503 "cannot reach the gateway at …" and makes no session.
Failed sign-ins are limited per browser address and per token digest (console/throttle.py) and
each refusal is logged with the browser's address (the forwarded one only behind a trusted
proxy), never the token."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from effectgate.console.door.csrf import client_address
from effectgate.console.link import GatewayDown, SignInRefused
from effectgate.console.web import parts, render

log = logging.getLogger("effectgate.console")


def _next(request: Request, given: str) -> str:
    """Only a path of this console (never another site)."""
    return given if given.startswith("/") and not given.startswith("//") and "\\" not in given else "/inbox"


async def login_page(request: Request) -> Response:
    if parts(request).people.proxied:
        return RedirectResponse("/inbox", status_code=303)
    return render(request, "login.html", next=_next(request, request.query_params.get("next", "")))


async def login(request: Request) -> Response:
    people = parts(request).people
    if people.proxied:
        return RedirectResponse("/inbox", status_code=303)
    form = await request.form()
    token, target = str(form.get("token", "")).strip(), _next(request, str(form.get("next", "")))
    if not token:
        return render(request, "login.html", 400, next=target, error="Paste your token.")
    address = client_address(request.scope, parts(request).settings.trusted_proxy)
    wait = people.throttle.wait(address, token)
    if wait:
        digest = people.throttle.digest(token)
        log.warning("sign-in refused from %s: too many failed sign-ins (token %s)", address, digest)
        error = f"Too many failed sign-ins: try again in {wait:.0f}s."
        answer = render(request, "login.html", 429, next=target, error=error)
        answer.headers["retry-after"] = f"{wait:.0f}"
        return answer
    try:
        await people.sign_in(request, token)
    except SignInRefused as refused:
        people.throttle.failed(address, token)
        log.warning("sign-in refused from %s: %s (token %s)", address, refused, people.throttle.digest(token))
        error = "The gateway does not know this token as an operator's or an observer's."
        return render(request, "login.html", 401, next=target, error=error)
    except GatewayDown as down:
        # Logged once per outage by the link; no session was made.
        return render(request, "login.html", 503, next=target, error=down.sentence())
    return RedirectResponse(target, status_code=303)


async def logout(request: Request) -> Response:
    parts(request).people.sign_out(request)
    return RedirectResponse("/login", status_code=303)
