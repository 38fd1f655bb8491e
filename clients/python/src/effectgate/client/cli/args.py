"""The operator commands' options. Every command takes the connection options (`--target`,
`--token-env`, TLS) and `-o/--output` after its name; states and resolutions are read in any
case; durations are `90s`, `30m`, `1h`, `2d` or combinations such as `1h30m`."""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from effectgate.client.calls import RESOLUTIONS
from effectgate.client.states import State

STATES = State.names()
FORMATS = ("table", "wide", "json", "yaml")  # `-o`; the renderers (rich, yaml) load only to print
DEFAULT_TIMEOUT = 10.0  # seconds: an operator command's answer, or a hint about why there is none
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str) -> float:
    """Seconds in `90s`, `30m`, `1h30m`, `2d`, or a bare number of seconds."""
    text = text.strip().lower().replace(" ", "")
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if seconds < 0:
            raise argparse.ArgumentTypeError(f"{text!r}: a duration must not be negative")
        return seconds
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 90s, 30m, 1h30m or 2d")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def since(text: str) -> float:
    """`--since`: a duration back from now (`1h`) or an RFC 3339 time; the epoch seconds it names."""
    if text[:1].isdigit() and ("T" in text or "-" in text[1:]):
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an RFC 3339 time (2026-01-31T12:00:00Z)") from None
        if moment.tzinfo is None:
            raise argparse.ArgumentTypeError(f"{text!r} has no time zone: add Z or an offset such as +02:00")
        return moment.timestamp()
    return time.time() - duration(text)


def count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 (all) or more")
    return value


def connection(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--target", default=None, help="host:port (default $EFFECTGATE_TARGET, else 127.0.0.1:50051)")
    sub.add_argument("--token-env", default="EFFECTGATE_TOKEN", help="variable holding the bearer token")
    sub.add_argument(
        "--timeout",
        type=duration,
        default=DEFAULT_TIMEOUT,
        help=f"wait for the gateway at most (default {DEFAULT_TIMEOUT:g}s)",
    )
    sub.add_argument("--tls", action="store_true", default=None, help="TLS with the system's root certificates")
    sub.add_argument("--tls-ca", default=None, help="PEM roots to verify the gateway (default $EFFECTGATE_TLS_CA)")
    sub.add_argument("--tls-cert", default=None, help="client certificate for mTLS (default $EFFECTGATE_TLS_CERT)")
    sub.add_argument("--tls-key", default=None, help="its private key (default $EFFECTGATE_TLS_KEY)")
    out = sub.add_mutually_exclusive_group()
    out.add_argument(
        "-o", "--output", choices=FORMATS, default="table", type=str.lower, help="table (default), wide, json, yaml"
    )
    out.add_argument("--json", dest="output", action="store_const", const="json", help="the same as -o json")


OPERATOR_ACTS = {
    "approve": "approve an action that waits for approval",
    "deny": "say no to an action that waits for approval (the note is the reason the agent reads)",
    "grant-bypass": "allow one new effect",
}


def add_commands(commands: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Adds the operator commands to an argparse sub-parsers object; `parents` carry options
    every command also takes (the gateway's --log-level and the like, accepted after the name)."""

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(name, help=help_text, parents=list(parents))
        connection(sub)
        return sub

    listing = command("actions", "list actions, newest first")
    listing.add_argument("--state", type=str.upper, choices=STATES, help="one state, in any case (unknown, CONFIRMED)")
    listing.add_argument("--run", default="", help="one run id")
    listing.add_argument("--tool", default="", help="one tool")
    listing.add_argument("--since", type=since, default=None, help="created since: 1h, 30m, or 2026-01-31T12:00:00Z")
    listing.add_argument("--limit", type=count, default=100, help="the newest N (default 100); 0: all")
    listing.add_argument("--chunk-size", type=count, default=500, help="actions asked for per page (default 500)")
    listing.add_argument("-w", "--watch", action="store_true", help="then print new and changed actions until Ctrl-C")
    listing.add_argument(
        "--interval", type=duration, default=2.0, help="--watch on a gateway without WatchActions: poll every (2s)"
    )
    # Stop a watch after N intervals (tests).
    listing.add_argument("--watch-count", type=count, default=0, help=argparse.SUPPRESS)
    trail = command("events", "the audit trail: every action's events, in the tenant's hash-chain order")
    trail.add_argument("--since", type=since, default=None, help="written since: 24h, 30m, or 2026-01-31T12:00:00Z")
    trail.add_argument("--until", type=since, default=None, help="written before: a duration ago or an RFC 3339 time")
    trail.add_argument("--principal", default="", help="one principal (an operator's name)")
    trail.add_argument("--kind", default="", help="one kind of event: claim, approve, deny, expire, ...")
    trail.add_argument("--tool", default="", help="one tool")
    trail.add_argument("--chunk-size", type=count, default=500, help="events asked for per page (default 500)")
    trail.add_argument("-w", "--watch", action="store_true", help="then follow new events until Ctrl-C (for a SIEM)")
    trail.add_argument("--interval", type=duration, default=2.0, help="--watch: poll every (default 2s)")
    trail.add_argument("--watch-count", type=count, default=0, help=argparse.SUPPRESS)
    for name, help_text in (
        ("show", "every field of one action"),
        ("describe", "one action in full: every field, and what else the gateway tells about it"),
        ("verify", "read the provider's state back now"),
    ):
        command(name, help_text).add_argument("action_id")
    # Operator acts with a note.
    for name, help_text in OPERATOR_ACTS.items():
        sub = command(name, help_text)
        sub.add_argument("action_id")
        sub.add_argument("--note", required=True)
        if name == "approve":  # what the approver was shown (describe): the gateway refuses anything else
            sub.add_argument("--fingerprint", default="", help="the payload's fingerprint you were shown")
            sub.add_argument("--policy-version", default="", help="the tool's policy version you were shown")
    limits = command("limits", "each tool's limits, what is used and what is left")
    limits.add_argument("--tool", default="", help="one tool (default: every tool that has limits)")
    limits.add_argument("--run", default="", help="also this run's use of the per-run caps")
    grant = command("grant-limit", "let one action a limit refused past the limit, once")
    grant.add_argument("action_id", help="the action_id the refusal named")
    grant.add_argument("--note", required=True)
    reconcile = command("reconcile", "settle an UNKNOWN action with the evidence you found")
    reconcile.add_argument("action_id")
    reconcile.add_argument("--resolution", required=True, type=str.upper, choices=sorted(RESOLUTIONS))
    reconcile.add_argument("--note", required=True)
    reconcile.add_argument("--external-id", default="")
