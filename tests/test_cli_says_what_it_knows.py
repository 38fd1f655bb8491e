"""The CLI says only what it knows, the same way in every reply: money only where the payload
names a currency, the AMOUNT and TO of an action in the answer of `approve` and `reconcile` as in
`actions`, and each plug-in command described in `effectgate --help` by its own words."""

from __future__ import annotations

import asyncio
import re
import sys

from effectgate.client.cli import render
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests import test_operator_cli
from tests.otlp_receiver import ChildGateway
from tests.test_operator_cli import cli, execute

# The operator CLI tests' gateway (a child `effectgate serve` on the Stripe simulator), as fixtures here.
served = test_operator_cli.served
sim = test_operator_cli.sim


def test_an_amount_is_money_only_where_the_payload_names_a_currency() -> None:
    assert "10.00" in render.amount({"payload": {"amount": 1000, "currency": "usd"}})
    # A ledger entry's amount with no currency: the number as given, never "minor units of an
    # unknown currency"; with a code that is no currency, the code beside it.
    assert render.amount({"payload": {"amount": 25}}) == "25"
    assert render.amount({"payload": {"amount": "25", "currency": "pts"}}) == "25 PTS"
    assert render.amount({"payload": {"account": "acct_1"}}) == ""


def _row(out: str) -> dict[str, str]:
    header, row = out.splitlines()[:2]
    return dict(zip(header.split(), row.split(), strict=False))


async def test_approve_and_reconcile_answer_in_the_columns_of_actions(
    served: tuple[ChildGateway, str], sim: StripeSimulator
) -> None:
    _, target = served
    waiting = await execute(target, "wait", tool="charge_approved", scope="order:2")
    sim.injector.script(["drop_after_commit"])
    lost = await execute(target, "lost", scope="order:3")
    _, listed, _ = await cli("actions", "--state", "unknown", target=target)
    assert (_row(listed)["AMOUNT"], _row(listed)["TO"]) == ("$10.00", "cus_42"), listed
    _, approved, _ = await cli("approve", waiting.action_id, "--note", "checked the order", target=target)
    assert (_row(approved)["AMOUNT"], _row(approved)["TO"]) == ("$10.00", "cus_42"), approved
    charge = str(sim.ledger[-1]["id"])
    args = ("reconcile", lost.action_id, "--resolution", "confirmed", "--note", "seen", "--external-id", charge)
    _, settled, _ = await cli(*args, target=target)
    assert (_row(settled)["AMOUNT"], _row(settled)["TO"]) == ("$10.00", "cus_42"), settled


async def test_the_help_describes_each_plug_in_command_in_its_own_words() -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", "--help", stdout=asyncio.subprocess.PIPE
    )
    out = (await asyncio.wait_for(child.communicate(), 120))[0].decode()
    assert child.returncode == 0, out
    words = {
        "chaos": "the chaos study",
        "console": "the operator console",
        "dev": "a gateway to try",
        "mcp": "the MCP front door",
    }
    for name, said in words.items():
        assert re.search(rf"^\s+{name}\s+{said}", out, re.M), out
    assert "plug-in command" not in out, out
