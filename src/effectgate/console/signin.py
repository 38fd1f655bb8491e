"""Sign-in with a bearer token (kept in the server-side session), and sign-out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from effectgate.client import Unavailable
from effectgate.console.link import SignInRefused
from effectgate.console.web import parts, render


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
    try:
        await people.sign_in(request, token)
    except SignInRefused:
        error = "The gateway does not know this token as an operator's or an observer's."
        return render(request, "login.html", 401, next=target, error=error)
    except Unavailable:
        return render(request, "login.html", 503, next=target, error="The gateway cannot be reached.")
    return RedirectResponse(target, status_code=303)


async def logout(request: Request) -> Response:
    parts(request).people.sign_out(request)
    return RedirectResponse("/login", status_code=303)
