"""The console's sentences about an action: what it asks for ("billing-agent asks to charge
€125.00 to cus_marta_ruiz: Deposit"), what Approve (or the decision it waits for) will do, and
what happened to the money as of now. Plain text: the templates escape it."""

from __future__ import annotations

import re

from effectgate.client import State
from effectgate.v1 import gateway_pb2 as pb

# A tool's first word that says what it does with money ("charge_card" -> "charge").
MONEY_VERBS = frozenset({"charge", "refund", "pay", "payout", "transfer", "capture", "send", "invoice", "credit"})


def _words(tool: str) -> list[str]:
    return [w for w in re.split(r"[._\-\s]+", tool) if w]


def asks(agent: str, tool: str, amount: str, party: str, about: str) -> str:
    """One sentence: who asks for what, for how much, to whom and why."""
    who = agent or "An agent"
    parts = _words(tool)
    if amount:
        verb = parts[0].lower() if parts and parts[0].lower() in MONEY_VERBS else ""
        what = f"to {verb} {amount}" if verb else f"for {tool}: {amount}"
    else:
        what = f"to {' '.join(parts) or tool}" if parts else f"for {tool}"
    text = f"{who} asks {what}"
    if party:
        text += f" to {party}"
    if about:
        text += f": {about}"
    return text


def approve_does(action: pb.Action, amount: str, party: str) -> str:
    """What the decision the action waits for will do."""
    if action.state == State.UNKNOWN:
        return "Reconcile: say what you found at the provider; nothing is sent again."
    if action.state != State.AWAITING_APPROVAL:
        return ""
    left = max(action.approvals_required - len(action.approved_by), 1)
    if left > 1:
        return f"Approve adds 1 of the {left} approvals still needed; nothing is sent until the last."
    what = f"{amount} to {party}" if amount and party else amount or (f"it to {party}" if party else "it")
    return f"Approve sends {what}, once."


def outcome(action: pb.Action, amount: str) -> str:
    """What happened to the money (or the message) as the action's state says now."""
    what = amount or "the effect"
    external = action.receipt.external_id if action.HasField("receipt") else ""
    state = action.state
    if state == State.CONFIRMED:
        return f"{what} went through" + (f" ({external})" if external else "")
    if state in (State.REJECTED, State.NOT_FOUND):
        return "nothing moved" if amount else "nothing was sent"
    if state == State.UNKNOWN:
        return f"not proven: {what} may or may not have gone through"
    if state == State.AWAITING_APPROVAL:
        return "nothing moved yet: waiting for approval" if amount else "nothing sent yet: waiting for approval"
    if state == State.DISPATCHED:
        return f"{what} is being sent"
    return "not sent yet"
