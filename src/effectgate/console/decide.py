"""Decisions: Approve, Deny, Reconcile, Grant bypass. Each is two POSTs: the form (with its
required note) leads to a confirmation page that repeats what will happen; its button makes the
call. Only operators: an observer's POST is refused here and never forwarded to the gateway."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from effectgate.client import EffectGateClient
from effectgate.console import present
from effectgate.console.people import Person
from effectgate.console.web import parts, reader, render, signed_in

RESOLUTIONS = ("CONFIRMED", "REJECTED", "NOT_FOUND")


@dataclass(frozen=True)
class Verb:
    name: str  # in the URL
    label: str  # the button's name
    needs: str  # the state the action must be in ("" : any)


VERBS = {
    "approve": Verb("approve", "Approve", "AWAITING_APPROVAL"),
    "deny": Verb("deny", "Deny", "AWAITING_APPROVAL"),
    "reconcile": Verb("reconcile", "Reconcile", "UNKNOWN"),
    "bypass": Verb("bypass", "Grant bypass", ""),
}


def forbidden(request: Request, person: Person) -> Response:
    message = f"Signed in as {person.role}: only operators decide. Nothing was sent to the gateway."
    return render(request, "error.html", 403, person=person, title="Not allowed", message=message)


async def fields(request: Request) -> dict[str, str]:
    form = await request.form()
    names = ("note", "resolution", "external_id", "fingerprint", "policy_version")
    return {k: str(form.get(k, "")).strip() for k in names}


def problems(verb: Verb, given: dict[str, str]) -> list[str]:
    found = [] if given["note"] else ["A note is required: it is kept with the action and shown to the agent."]
    if verb.name == "reconcile" and given["resolution"] not in RESOLUTIONS:
        found.append("Choose what you established: CONFIRMED, REJECTED or NOT_FOUND.")
    return found


async def _shown(request: Request, client: EffectGateClient) -> dict[str, Any]:
    settings = parts(request).settings
    record = await client.get(request.path_params["action_id"])
    return present.detail(record, datetime.now(UTC), settings.trace_url, settings.provider_url, reader(request))


def operators_verb(request: Request, person: Person) -> Verb | Response:
    """The decision the URL names, or the page that refuses it (no such verb, not an operator)."""
    verb = VERBS.get(request.path_params["verb"])
    if verb is None:
        return render(request, "error.html", 404, person=person, title="Not found", message="No such decision.")
    if not person.operator:
        return forbidden(request, person)
    return verb


async def _confirmation(
    request: Request, person: Person, client: EffectGateClient, verb: Verb, given: dict[str, str], issues: list[str]
) -> Response:
    shown = await _shown(request, client)
    status = 422 if issues else 200
    return render(request, "confirm.html", status, person=person, a=shown, verb=verb, given=given, issues=issues)


@signed_in
async def confirm(request: Request, person: Person, client: EffectGateClient) -> Response:
    verb = operators_verb(request, person)
    if isinstance(verb, Response):
        return verb
    given = await fields(request)
    return await _confirmation(request, person, client, verb, given, problems(verb, given))


@signed_in
async def decide(request: Request, person: Person, client: EffectGateClient) -> Response:
    verb = operators_verb(request, person)
    if isinstance(verb, Response):
        return verb
    given = await fields(request)
    issues = problems(verb, given)
    if issues:
        return await _confirmation(request, person, client, verb, given, issues)
    action_id = request.path_params["action_id"]
    note = given["note"]
    if verb.name == "approve":
        # Bound to what the confirmation page showed: a changed payload or policy is refused (APPROVAL_STALE).
        await client.approve(
            action_id, note=note, fingerprint=given["fingerprint"], policy_version=given["policy_version"]
        )
    elif verb.name == "deny":
        await client.deny(action_id, note=note)
    elif verb.name == "reconcile":
        await client.reconcile(action_id, resolution=given["resolution"], note=note, external_id=given["external_id"])
    else:
        await client.grant_bypass(action_id, note=note)
    return RedirectResponse(f"/actions/{quote(action_id, safe='')}?done={verb.name}", status_code=303)
