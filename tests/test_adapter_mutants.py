"""The conformance suite, tested by mutation: adapters broken on purpose, one claim each, must
fail it with a message naming the broken claim. The mutants are the ledger adapter of
docs/writing-an-adapter.md (loaded from the page, run against its simulator) with one mistake
each, and the `http` adapter's record_invoice table (docs/examples/crm-http-adapters.toml, against
the CRM simulator) with one wrong key each: the mistakes that record "no effect" where money
moved, or send an action twice."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from effectgate.adapters import (
    ActionCall,
    Adapter,
    AmbiguousError,
    Capabilities,
    DefinitiveError,
    NoEffectError,
    Observation,
    Outcome,
    RateLimited,
    Receipt,
)
from effectgate.adapters.testing import CHECKS, ConformanceTarget
from tests.adapter_targets import Target, start_target
from tests.doc_files import page_files, write_files

PAGE = Path(__file__).resolve().parent.parent / "docs" / "writing-an-adapter.md"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ModuleType]]:
    """The page's modules, imported from the files it shows."""
    folder = write_files(tmp_path_factory.mktemp("adapter-page"), page_files(PAGE))
    sys.path.insert(0, str(folder))
    try:
        yield {name: importlib.import_module(name) for name in ("ledger_sim", "ledger_adapter", "test_ledger_adapter")}
    finally:
        sys.path.remove(str(folder))
        for name in ("ledger_sim", "ledger_adapter", "test_ledger_adapter"):
            sys.modules.pop(name, None)


async def failures(
    start: Callable[[], Awaitable[Any]], stop: Callable[[Any], Awaitable[None]], only: str | None = None
) -> dict[str, str]:
    """Runs every check (or the one named `only`) against a fresh target each; the failed checks
    and their messages. A mutant runs only the check its mistake breaks: the sound adapter passing
    every check is proved once, and each of the suite's checks starts a fresh target, so the other
    checks would only say again what that run says."""
    failed: dict[str, str] = {}
    for name, check in CHECKS.items():
        if only is not None and name != only:
            continue
        target = await start()
        try:
            await check(target)
        except AssertionError as exc:
            failed[name] = str(exc)
        finally:
            await stop(target)
    return failed


# -- the ledger adapter of the page, broken one claim at a time -------------------------------


def five_hundred_as_refusal(base: type[Adapter]) -> type[Adapter]:
    class Mutant(base):  # type: ignore[valid-type,misc]
        async def execute(self, call: ActionCall) -> Receipt:
            try:
                return await base.execute(self, call)
            except AmbiguousError as exc:
                if exc.code.startswith("http_5"):
                    raise DefinitiveError(exc.message, code=exc.code) from None
                raise

    return Mutant


def pending_as_posted(base: type[Adapter]) -> type[Adapter]:
    class Mutant(base):  # type: ignore[valid-type,misc]
        async def execute(self, call: ActionCall) -> Receipt:
            try:
                return await base.execute(self, call)
            except AmbiguousError as exc:
                if exc.code == "partial":
                    return Receipt(external_id="pending")
                raise

        async def verify(self, call: ActionCall) -> Observation:
            seen = await base.verify(self, call)
            if seen.outcome is Outcome.UNKNOWN and "pending" in seen.detail:
                return Observation(Outcome.CONFIRMED, detail="pending counted as posted")
            return seen

    return Mutant


def verify_never_finds(base: type[Adapter]) -> type[Adapter]:
    class Mutant(base):  # type: ignore[valid-type,misc]
        async def verify(self, call: ActionCall) -> Observation:
            return Observation(Outcome.NOT_FOUND, detail="looked in the wrong place")

    return Mutant


def window_ignored(base: type[Adapter]) -> type[Adapter]:
    class Mutant(base):  # type: ignore[valid-type,misc]
        @property
        def capabilities(self) -> Capabilities:
            declared: Capabilities = super().capabilities
            return dataclasses.replace(declared, consistency_window=0.0)

    return Mutant


def short_keeps_processing(base: type[Adapter]) -> type[Adapter]:
    class Mutant(base):  # type: ignore[valid-type,misc]
        @property
        def capabilities(self) -> Capabilities:
            declared: Capabilities = super().capabilities
            return dataclasses.replace(declared, keeps_processing=1.0)

    return Mutant


def keeps_processing_shorter_than_a_late_write(base: type[Adapter]) -> type[Adapter]:
    """The same mistake, caught by what the provider does: a write that lands after its caller
    gave up, read as absent before it landed (no static comparison with slow_seconds)."""
    return short_keeps_processing(base)


def key_not_sent(base: type[Adapter]) -> type[Adapter]:
    class Mutant(base):  # type: ignore[valid-type,misc]
        async def execute(self, call: ActionCall) -> Receipt:
            return await base.execute(self, dataclasses.replace(call, provider_key=""))

    return Mutant


def retry_after_ignored(base: type[Adapter]) -> type[Adapter]:
    class Mutant(base):  # type: ignore[valid-type,misc]
        async def execute(self, call: ActionCall) -> Receipt:
            try:
                return await base.execute(self, call)
            except RateLimited as exc:
                raise NoEffectError(exc.message, code=exc.code) from None

    return Mutant


# mutant -> (the check that must fail, words of its message)
LEDGER_MUTANTS: dict[Callable[[type[Adapter]], type[Adapter]], tuple[str, str]] = {
    five_hundred_as_refusal: ("error_after_commit_is_ambiguous", "a 5xx after the write must be ambiguous"),
    pending_as_posted: ("partial_never_confirmed", "a receipt for a partial effect"),
    verify_never_finds: ("lost_response_is_verified", "after a lost response: verify gave Outcome.NOT_FOUND"),
    window_ignored: ("not_found_is_not_absence", "consistency window (0 s) must cover the provider's visibility lag"),
    short_keeps_processing: ("slow_write_is_ambiguous", "keeps_processing (1 s) is shorter than the provider's slow"),
    keeps_processing_shorter_than_a_late_write: (
        "late_write_is_never_absent_early",
        "keeps_processing (1 s) is shorter than this provider takes to apply a write",
    ),
    key_not_sent: ("key_dedups_a_resend", "the idempotency key is not sent"),
    retry_after_ignored: ("rate_limit_is_no_effect", "the provider named a pause (Retry-After: 1)"),
}


def ledger_targets(page: dict[str, ModuleType], adapter: type[Adapter]) -> tuple[Any, Any]:
    base = page["test_ledger_adapter"].LedgerTarget

    class MutantTarget(base):  # type: ignore[valid-type,misc]
        async def build(self, secret: str | None = None, *, timeout: float | None = None) -> Adapter:
            await super().build(secret, timeout=timeout)  # sets the token variable the table names
            return adapter.from_settings("ledger", self.settings(timeout))

    async def start() -> ConformanceTarget:
        target = MutantTarget()
        await target.sim.start()
        return target

    async def stop(target: Any) -> None:
        await target.sim.stop()

    return start, stop


async def test_the_page_adapter_passes_every_check(page: dict[str, ModuleType]) -> None:
    assert await failures(*ledger_targets(page, page["ledger_adapter"].LedgerAdapter)) == {}


@pytest.mark.parametrize("mutant", list(LEDGER_MUTANTS), ids=[m.__name__ for m in LEDGER_MUTANTS])
async def test_a_broken_adapter_fails_the_suite_naming_the_claim(
    page: dict[str, ModuleType], mutant: Callable[[type[Adapter]], type[Adapter]]
) -> None:
    check, words = LEDGER_MUTANTS[mutant]
    failed = await failures(*ledger_targets(page, mutant(page["ledger_adapter"].LedgerAdapter)), only=check)
    assert check in failed, f"{mutant.__name__} passed {check}; failures: {failed}"
    assert words in failed[check], failed[check]


# -- the http adapter's record_invoice table, one wrong key at a time --------------------------

HTTP_MUTANTS: dict[str, tuple[dict[str, Any], str, str]] = {
    "500_as_refusal": (
        {"definitive_statuses": [400, 404, 422, 500]},
        "error_after_commit_is_ambiguous",
        "a 5xx after the write must be ambiguous",
    ),
    "half_invoice_as_recorded": (
        {"response_expect": [], "expect": [{"path": "data", "one": [{"path": "id", "equals": "{id}"}]}]},
        "partial_never_confirmed",
        "a receipt for a partial effect",
    ),
    "verify_never_finds": (
        {"verify": {"url": "/invoice?id={id}"}, "absent_statuses": [404]},
        "lost_response_is_verified",
        "after a lost response: verify gave Outcome.NOT_FOUND",
    ),
    "window_ignored": (
        {"consistency_window": 0.1},
        "not_found_is_not_absence",
        "consistency window (0.1 s) must cover",
    ),
    "short_keeps_processing": (
        {"keeps_processing": 1},
        "slow_write_is_ambiguous",
        "keeps_processing (1 s) is shorter",
    ),
    "keeps_processing_shorter_than_a_late_write": (
        {"keeps_processing": 1},
        "late_write_is_never_absent_early",
        "keeps_processing (1 s) is shorter than this provider takes to apply a write",
    ),
    "dedup_claimed_by_an_api_without_keys": (
        {"dedups_on_key": True, "idempotency_header": "Idempotency-Key", "key_retention": 86400},
        "key_dedups_a_resend",
        "the idempotency key is not sent",
    ),
}


def http_targets(changes: dict[str, Any]) -> tuple[Any, Any]:
    async def start() -> Target:
        target = await start_target("http:record_invoice")
        table = target._settings
        target._settings = lambda: table() | changes
        return target

    async def stop(target: Target) -> None:
        await target.stop()

    return start, stop


@pytest.mark.parametrize("name", list(HTTP_MUTANTS))
async def test_a_wrong_http_table_fails_the_suite_naming_the_claim(name: str) -> None:
    changes, check, words = HTTP_MUTANTS[name]
    failed = await failures(*http_targets(changes), only=check)
    assert check in failed, f"{name} passed {check}; failures: {failed}"
    assert words in failed[check], failed[check]
