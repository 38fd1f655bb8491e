"""`effectgate dev trigger KIND`: make something happen to a running `make run`, in the spirit of
`stripe trigger` — the Stripe simulator's next charge loses its answer, answers 500 or is slow,
or a signed webhook about an action is sent now. It speaks to the simulators' admin routes
(`/_sim/*`, docs/testing.md) and to the gateway's webhook listener, at the ports `make run` wrote
in its folder's `state.json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from effectgate.adapters.stripe.adapter import ACTION_METADATA_KEY
from effectgate_lab.devrun.config import SECRET, WEBHOOK_SECRET
from effectgate_lab.devrun.layout import DevError, read_state
from effectgate_lab.simulators.webhook_sender import WebhookSender

# KIND -> (the fault scripted for the next charge, what it does).
FAULTS = {
    "lost-answer": ("drop_after_commit", "the next charge is applied, then its answer is lost"),
    "error-500": ("error_after_commit", "the next charge is applied, then answered with a 500"),
    "slow": ("slow", "the next charge is answered after {slow:g} s"),
    "lost-request": ("drop_before_commit", "the next charge's request is lost before anything is applied"),
}
KINDS = (*FAULTS, "webhook")
SLOW_SECONDS = 5.0


def trigger(workdir: Path, kind: str, action_id: str = "") -> str:
    """Does it; the one line to print."""
    state = read_state(workdir)
    stripe = str(state["stripe_url"])
    with httpx.Client(timeout=10.0) as http:
        if kind in FAULTS:
            fault, said = FAULTS[kind]
            if kind == "slow":
                _post(http, f"{stripe}/_sim/faults", {"slow_seconds": SLOW_SECONDS})
            _post(http, f"{stripe}/_sim/script", [fault])
            return said.format(slow=SLOW_SECONDS) + " (Stripe simulator)"
        if kind == "webhook":
            if not action_id:
                raise DevError("trigger webhook needs the action id: effectgate dev trigger webhook ACTION_ID")
            ports: dict[str, Any] = dict(state["ports"])  # type: ignore[call-overload]
            return _webhook(http, stripe, int(ports["webhooks"]), action_id)
    raise DevError(f"unknown trigger {kind!r}: one of {', '.join(KINDS)}")


def _post(http: httpx.Client, url: str, body: object) -> None:
    try:
        answer = http.post(url, content=json.dumps(body), headers={"content-type": "application/json"})
    except httpx.HTTPError as exc:
        raise DevError(f"the simulator at {url} does not answer ({exc}): is `make run` still running?") from None
    if answer.status_code != 200:
        raise DevError(f"the simulator refused: {answer.status_code} {answer.text.strip()}")


def _webhook(http: httpx.Client, stripe: str, port: int, action_id: str) -> str:
    """A signed `payment_intent.succeeded` (or `payment_failed`) for the intent the action made."""
    query = f"metadata['{ACTION_METADATA_KEY}']:'{action_id}'"
    try:
        found = http.get(
            f"{stripe}/v1/payment_intents/search",
            params={"query": query},
            headers={"Authorization": f"Bearer {SECRET}"},
        )
    except httpx.HTTPError as exc:
        raise DevError(f"the Stripe simulator does not answer ({exc}): is `make run` still running?") from None
    intents = found.json().get("data", []) if found.status_code == 200 else []
    if not intents:
        raise DevError(f"the Stripe simulator holds no payment for {action_id} (yet): nothing to announce")
    intent = intents[0]
    kind = "payment_intent.succeeded" if intent.get("status") == "succeeded" else "payment_intent.payment_failed"
    sender = WebhookSender(url=f"http://127.0.0.1:{port}/webhooks/stripe", secret=WEBHOOK_SECRET)
    event = sender.stripe_event(kind, intent)
    body = json.dumps(event).encode()
    try:
        answer = http.post(sender.url, content=body, headers=sender.headers(body))
    except httpx.HTTPError as exc:
        raise DevError(f"the gateway's webhook listener does not answer ({exc})") from None
    return f"sent {kind} {event['id']} for {intent['id']} ({action_id}): the gateway answered {_said(answer)}"


def _said(answer: httpx.Response) -> str:
    """`200: settled`, `200: ignored (ACT is settled already: ...)`, or the status and body."""
    try:
        body = answer.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or "outcome" not in body:
        return f"{answer.status_code} {answer.text.strip()}"
    why = f" ({body['reason']})" if body.get("reason") else ""
    return f"{answer.status_code}: {body['outcome']}{why}"
