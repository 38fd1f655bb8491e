"""`effectgate check --probe` for the `http` adapter's config-only tools (issue 47): besides the GET
of `probe_path`, the configured verify read of an action that never happened (every id made up),
against the CRM simulator on loopback. It checks the credentials and that the read does not
confirm what never happened; it never writes."""

from __future__ import annotations

import pytest

from effectgate.adapters import AdapterError, CredentialsRefused
from effectgate.adapters.http.adapter import HttpAdapter
from tests.adapter_targets import Target, start_target


async def built(target: Target, secret: str | None = None) -> HttpAdapter:
    adapter = await target.build(secret)
    assert isinstance(adapter, HttpAdapter)
    return adapter


def with_changes(target: Target, **changes: object) -> None:
    table = target._settings
    target._settings = lambda: table() | changes


@pytest.mark.parametrize("name", ["http:record_invoice", "http:activate_customer"])
async def test_the_verify_read_is_probed_without_a_probe_path(name: str) -> None:
    target = await start_target(name)
    try:
        effects = await target.effects()
        good = await built(target)
        try:
            said = await good.probe()
        finally:
            await good.close()
        assert "nothing checked" not in said, said
        assert "verify GET /" in said and "for an action that never happened" in said, said
        wrong = await built(target, "wrong-secret-0000")
        try:
            with pytest.raises(CredentialsRefused) as refused:
                await wrong.probe()
            assert "verify GET" in str(refused.value) and "wrong-secret" not in str(refused.value)
        finally:
            await wrong.close()
        assert await target.effects() == effects  # a probe never makes an effect
    finally:
        await target.stop()


async def test_a_list_read_proves_the_made_up_action_absent() -> None:
    target = await start_target("http:record_invoice")
    try:
        adapter = await built(target)
        try:
            said = await adapter.probe()
        finally:
            await adapter.close()
        assert "verify GET /invoices?id={id}: HTTP 200, NOT_FOUND for an action that never happened" in said, said
    finally:
        await target.stop()


async def test_a_read_that_confirms_anything_fails_the_probe() -> None:
    """A verify that ignores the id (the whole list) with a postcondition any answer meets: it
    would confirm every lost write. The probe says so before the first action needs it."""
    target = await start_target("http:record_invoice")
    try:
        with_changes(target, verify={"url": "/invoices"}, expect=[{"path": "data", "present": True}], absent_when=[])
        adapter = await built(target)
        try:
            with pytest.raises(AdapterError) as caught:
                await adapter.probe()
        finally:
            await adapter.close()
        assert "CONFIRMED an action that never happened" in str(caught.value), caught.value
        assert caught.value.code == "verify_confirms_anything"
    finally:
        await target.stop()


async def test_a_read_without_an_absence_rule_is_told() -> None:
    target = await start_target("http:record_invoice")
    try:
        with_changes(target, absent_when=[])
        adapter = await built(target)
        try:
            said = await adapter.probe()
        finally:
            await adapter.close()
        assert "UNKNOWN for an action that never happened" in said and "absent_when" in said, said
    finally:
        await target.stop()
