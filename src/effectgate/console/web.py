"""What every page handler shares: the console's parts on app.state, rendering with the CSRF
token, the signed-in person, and the gateway's errors as pages."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import grpc
from babel import Locale
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from effectgate.client import EffectGateClient, EffectGateError, NotFound, RecordTooNew, Unauthenticated
from effectgate.client.money_text.money import reader_locale
from effectgate.console.link import GatewayDown, GatewayLink, is_down
from effectgate.console.people import People, Person
from effectgate.console.settings import ConsoleSettings
from effectgate.console.wrap import wrappable

# Autoescape is on for .html (Starlette's default, select_autoescape): every string an agent or a
# provider wrote (run ids, scopes, notes, reasons, payload values) is rendered as text.
templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
# JSON for people: indented, keys sorted, "€" as "€" (autoescaped like any string, unlike tojson's Markup).
templates.env.filters["json"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
templates.env.filters["wrappable"] = wrappable

Page = Callable[[Request, Person, EffectGateClient], Awaitable[Response]]


class Parts:
    def __init__(self, settings: ConsoleSettings, link: GatewayLink, people: People) -> None:
        self.settings, self.link, self.people = settings, link, people


def parts(request: Request) -> Parts:
    found: Parts = request.app.state.parts
    return found


def reader(request: Request) -> Locale:
    """The reader's locale for money (the browser's Accept-Language; en_US when it names none CLDR knows)."""
    return reader_locale(request.headers.get("accept-language", "")[:500])


def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
    csrf = request.scope.get("csrftoken")
    context.setdefault("person", None)
    context["csrftoken"] = csrf() if callable(csrf) else ""
    context["proxied"] = parts(request).people.proxied
    return templates.TemplateResponse(request, name, context, status_code=status)


def signed_in(handler: Page) -> Callable[[Request], Awaitable[Response]]:
    """The page for a signed-in person (else the sign-in page); a gateway error becomes a page."""

    async def page(request: Request) -> Response:
        console = parts(request)
        try:
            person = await console.people.of(request)
        except GatewayDown as down:
            return unreachable(request, None, down)
        if person is None:
            if console.people.proxied:
                message = "The proxy named no principal this console knows."
                return render(request, "error.html", 401, title="Not signed in", message=message)
            return RedirectResponse(f"/login?{urlencode({'next': request.url.path})}", status_code=303)
        try:
            answer = await handler(request, person, console.link.client(person.token))
        except Unauthenticated:  # the token was revoked or rotated at the gateway
            console.people.sign_out(request)
            return RedirectResponse("/login", status_code=303)
        except NotFound:
            return render(request, "error.html", 404, person=person, title="Not found", message="No such action.")
        except grpc.aio.AioRpcError as error:
            if is_down(error):  # an outage, never "refused": nothing was decided
                return unreachable(request, person, console.link.outage(error))
            if isinstance(error, EffectGateError):
                return refusal(request, person, error)
            message = f"{error.code().name}: {error.details() or ''}"
            return render(request, "error.html", 502, person=person, title="The gateway answered", message=message)
        console.link.reachable()
        return answer

    return page


def unreachable(request: Request, person: Person | None, down: GatewayDown) -> Response:
    """503 while the gateway cannot be reached: what was asked was not done, and may be asked again."""
    message = f"{down.sentence()} Nothing was decided; try again when it is back."
    return render(request, "error.html", 503, person=person, title="Gateway unreachable", message=message)


def refusal(request: Request, person: Person, error: EffectGateError) -> Response:
    reason = f" ({error.reason})" if error.reason else ""
    message = f"{error.code().name}{reason}: {error.details() or ''}"
    status = 403 if error.code() == grpc.StatusCode.PERMISSION_DENIED else 409
    title = "The gateway refused"
    if isinstance(error, RecordTooNew):  # a rolling upgrade under way: say so, not "refused"
        title = "Stored by a newer gateway release"
        message += (
            f" (record version {error.stored_version}; this gateway reads up to {error.readable_version}."
            " Nothing was changed: open it through a replica of the newer release, or when the upgrade is done.)"
        )
    return render(request, "error.html", status, person=person, title=title, message=message)
