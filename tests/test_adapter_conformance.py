"""The adapter conformance suite (effectgate.adapters.testing) over every built-in adapter, each
against its real simulator on loopback: Stripe, the Postmark-style email API, SMTP verified
through a real Dovecot IMAP mailbox, SMTP without a mailbox (the UNKNOWN path), and the generic
HTTP adapter running the study's activate_customer and record_invoice against the CRM simulator.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from effectgate.adapters.testing import CHECKS, Check
from tests import dovecot
from tests.adapter_targets import CANARY, TARGET_NAMES, Target, start_target


def _missing(reason: str) -> None:
    # In CI a missing service is a failure: a skipped test would hide a broken adapter.
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: not skipping)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def imap_server() -> Iterator[dovecot.DovecotServer]:
    binary = dovecot.find_dovecot()
    if binary is None:
        _missing("dovecot not found (scripts/install_test_services.sh installs dovecot-imapd)")
    assert binary is not None
    server = dovecot.start_server(binary, password=CANARY)
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(params=TARGET_NAMES)
async def target(request: pytest.FixtureRequest) -> AsyncIterator[Target]:
    name = str(request.param)
    imap = request.getfixturevalue("imap_server") if name == "smtp+imap" else None
    started = await start_target(name, imap)
    try:
        yield started
    finally:
        await started.stop()


@pytest.mark.parametrize("check", list(CHECKS.values()), ids=list(CHECKS))
async def test_conformance(target: Target, check: Check) -> None:
    await check(target)


async def test_smtp_without_mailbox_declares_no_read_api() -> None:
    smtp = await start_target("smtp")
    try:
        adapter = await smtp.build()
        assert not adapter.capabilities.has_read_api
        assert not adapter.capabilities.dedups_on_key
        await adapter.close()
    finally:
        await smtp.stop()
