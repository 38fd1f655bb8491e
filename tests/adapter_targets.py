"""Conformance targets: each built-in adapter wired to its real provider simulator on loopback.

Every simulator's secret is `CANARY`, so the conformance suite can scan all adapter output for it.
Used by tests/test_adapter_conformance.py and tests/test_adapters_through_gateway.py.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.message import Message

from effectgate.adapters.base import Adapter
from effectgate.adapters.registry import build_adapter
from effectgate.tools.v1 import tools_pb2
from effectgate_lab.simulators.crm_sim import CrmSimulator
from effectgate_lab.simulators.faults import FaultPlan
from effectgate_lab.simulators.postmark_sim import PostmarkSimulator
from effectgate_lab.simulators.server import SimulatorServer
from effectgate_lab.simulators.smtp_sim import MaildirDrop, SmtpSimulator
from effectgate_lab.simulators.square_sim import SquareSimulator
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests import dovecot

CANARY = "sk_test_canary7f3a9c1eSECRET"
SECRET_ENV = "EG_TEST_PROVIDER_SECRET"
LAG = 0.6  # visibility lag of delayed writes; adapters declare a window of 2 s
WINDOW = 2.0
# How long a `slow` write's answer is held: the suite's impatient adapter gives up after a third.
SLOW = 3.0
SCENARIOS = Path(__file__).resolve().parent.parent / "docs" / "examples" / "crm-http-adapters.toml"
# The payment-method names agents use, mapped to Square's test sources (config only).
SQUARE_SOURCES = {"pm_card_visa": "cnon:card-nonce-ok", "pm_card_chargeDeclined": "cnon:card-nonce-declined"}
TARGET_NAMES = ["stripe", "square", "postmark", "smtp+imap", "smtp", "http:activate_customer", "http:record_invoice"]


def _email(to: str, tag: str) -> tools_pb2.SendEmail:
    msg = tools_pb2.SendEmail(to=to, subject=f"Your order {tag}", text=f"Hello,\norder {tag} shipped.\n")
    setattr(msg, "from", "shop@example.com")
    return msg


def _struct(doc: Mapping[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(dict(doc))
    return out


def scenario(name: str) -> dict[str, Any]:
    """One `[adapters.NAME]` table of the documented scenario config."""
    with SCENARIOS.open("rb") as f:
        return dict(tomllib.load(f)["adapters"][name])


class Target:
    """A `ConformanceTarget` over one simulator; `settings()` is the adapter's config table."""

    partial_hidden_in_reply = False
    visibility_lag = LAG
    canary = CANARY
    slow_seconds = SLOW
    # The `Retry-After` of the simulators' `rate_limit` fault (FaultPlan's default).
    retry_after: float | None = FaultPlan().retry_after

    def __init__(
        self,
        name: str,
        kind_settings: Callable[[], dict[str, Any]],
        good: Callable[[str], Message],
        refused: Callable[[str], Message],
    ) -> None:
        self.name = name
        self._settings = kind_settings
        self._good, self._refused = good, refused
        self.sim: SimulatorServer | SmtpSimulator | None = None
        self.adapter_name = name.replace(":", "_").replace("+", "_")

    def settings(self) -> dict[str, Any]:
        os.environ.setdefault(SECRET_ENV, CANARY)
        return self._settings()

    async def build(self, secret: str | None = None, *, timeout: float | None = None) -> Adapter:
        os.environ[SECRET_ENV] = CANARY if secret is None else secret
        try:
            table = self._settings() | ({} if timeout is None else {"timeout": timeout})
            return build_adapter(self.adapter_name, table)
        finally:
            os.environ[SECRET_ENV] = CANARY

    def good_payload(self, tag: str) -> Message:
        return self._good(tag)

    def refused_payload(self, tag: str) -> Message:
        return self._refused(tag)

    def inject(self, *faults: str | None) -> None:
        assert self.sim is not None
        if self.sim.injector.plan.slow_seconds != SLOW:
            self.sim.injector.configure(replace(self.sim.injector.plan, slow_seconds=SLOW))
        self.sim.injector.script(faults)

    async def effects(self) -> int:
        assert self.sim is not None
        if isinstance(self.sim, SmtpSimulator):
            return self.sim.effects()
        return len(self.sim.ledger)

    def effect_identities(self) -> list[str]:
        """Which logical action each recorded effect belongs to (a repeat is a duplicate)."""
        assert self.sim is not None
        if isinstance(self.sim, SmtpSimulator):
            return [e.message_id for e in self.sim.ledger]
        if isinstance(self.sim, CrmSimulator):
            return [str(e["params"]["id"]) for e in self.sim.ledger]
        if isinstance(self.sim, SquareSimulator):
            return [str(e["reference_id"]) for e in self.sim.ledger]
        # Stripe and Postmark: the action id the adapter put in the provider's metadata.
        return [str(e["metadata"]["effectgate_action_id"]) for e in self.sim.ledger]

    async def stop(self) -> None:
        if self.sim is not None:
            await self.sim.stop()


async def start_target(name: str, imap: dovecot.DovecotServer | None = None) -> Target:
    """Starts the simulator of target `name` (smtp+imap needs the Dovecot server)."""
    if name == "stripe":
        stripe = StripeSimulator(api_key=CANARY, visibility_lag=LAG, settle_seconds=LAG)
        url = await stripe.start()
        target = Target(
            name,
            lambda: {"api_base": url, "api_key_env": SECRET_ENV, "consistency_window": WINDOW, "timeout": 5},
            lambda tag: tools_pb2.ChargeCard(
                customer="cus_42", amount=1250, currency="USD", payment_method="pm_card_visa", description=tag
            ),
            lambda tag: tools_pb2.ChargeCard(
                customer="cus_42", amount=1250, currency="usd", payment_method="pm_card_chargeDeclined"
            ),
        )
        target.sim = stripe
        return target
    if name == "square":
        square = SquareSimulator(access_token=CANARY, visibility_lag=LAG, settle_seconds=LAG)
        url = await square.start()
        target = Target(
            name,
            lambda: {
                "kind": "square",
                "base_url": url,
                "access_token_env": SECRET_ENV,
                "source_ids": SQUARE_SOURCES,
                "consistency_window": WINDOW,
                "timeout": 5,
            },
            lambda tag: tools_pb2.ChargeCard(
                customer="cus_42", amount=1250, currency="USD", payment_method="pm_card_visa", description=tag
            ),
            lambda tag: tools_pb2.ChargeCard(
                customer="cus_42", amount=1250, currency="usd", payment_method="pm_card_chargeDeclined"
            ),
        )
        target.sim = square
        return target
    if name == "postmark":
        postmark = PostmarkSimulator(server_token=CANARY, visibility_lag=LAG)
        url = await postmark.start()
        target = Target(
            name,
            lambda: {
                "kind": "postmark",
                "base_url": url,
                "server_token_env": SECRET_ENV,
                "consistency_window": WINDOW,
                "timeout": 5,
            },
            lambda tag: _email("Customer@example.com ", tag),
            lambda tag: _email(f"gone-{tag}@inactive.test", tag),
        )
        target.sim = postmark
        return target
    if name in ("smtp", "smtp+imap"):
        drop = MaildirDrop(imap.maildir, imap.owner) if imap and name == "smtp+imap" else None
        smtp = SmtpSimulator(maildir=drop, visibility_lag=LAG, credentials=("mailer", CANARY))
        await smtp.start()

        def smtp_settings() -> dict[str, Any]:
            table: dict[str, Any] = {
                "kind": "smtp",
                "host": smtp.host,
                "port": smtp.port,
                "username_env": SECRET_ENV + "_USER",
                "password_env": SECRET_ENV,
                "consistency_window": WINDOW,
                "timeout": 5,
            }
            os.environ[SECRET_ENV + "_USER"] = "mailer"
            if drop is not None and imap is not None:
                table |= {
                    "imap_host": "127.0.0.1",
                    "imap_port": imap.port,
                    "imap_user": imap.user,
                    "imap_password_env": SECRET_ENV,
                }
            return table

        target = Target(
            name,
            smtp_settings,
            lambda tag: _email("customer@example.com", tag),
            lambda tag: _email(f"nobody-{tag}@invalid.test", tag),
        )
        # An SMTP 250 cannot tell that a filter later mangled the message, and a 451 names no pause.
        target.partial_hidden_in_reply = True
        target.retry_after = None
        target.sim = smtp
        return target
    if name.startswith("http:"):
        crm = CrmSimulator(api_key=CANARY, visibility_lag=LAG)
        url = await crm.start()
        table = "crm_activate" if name == "http:activate_customer" else "crm_invoice"

        def http_settings() -> dict[str, Any]:
            return scenario(table) | {"base_url": url, "token_env": SECRET_ENV, "consistency_window": WINDOW}

        if table == "crm_activate":
            good: Callable[[str], Message] = lambda tag: _struct({"customer": f"cus_{tag}"})  # noqa: E731
            refused: Callable[[str], Message] = lambda tag: _struct({"customer": f"nosuch-{tag}"})  # noqa: E731
        else:
            good = lambda tag: _struct({"id": f"inv_{tag}", "amount": 1250, "currency": "usd"})  # noqa: E731
            refused = lambda tag: _struct({"id": f"inv_{tag}", "amount": -5, "currency": "usd"})  # noqa: E731
        target = Target(name, http_settings, good, refused)
        target.sim = crm
        return target
    raise ValueError(f"unknown target {name}")
