"""Money as people read it (effectgate.client.money_text.money) and what an action asks for
(effectgate.client.money_text.asks): table tests of the formatter, the locales and the payload readers."""

from __future__ import annotations

import io
from typing import Any

import pytest

from effectgate.client.cli import render
from effectgate.client.money_text.asks import Ask, ask_of, minor_units, money_of, typed, typed_payload
from effectgate.client.money_text.money import Money, exponent, format_minor, reader_locale, terminal_locale


@pytest.mark.parametrize(
    ("minor", "currency", "locale", "shown"),
    [
        (5000, "jpy", "en_US", "¥5,000"),  # zero-decimal: 5000 yen, never ¥50.00
        (5000, "usd", "en_US", "$50.00"),
        (12500, "eur", "en_US", "€125.00"),
        (12500, "EUR", "de_DE", "125,00\xa0€"),
        (5000, "jpy", "de_DE", "5.000\xa0¥"),
        (-5000, "usd", "en_US", "-$50.00"),  # a refund, a reversal
        (-1, "eur", "en_US", "-€0.01"),
        (0, "usd", "en_US", "$0.00"),
        (12345, "kwd", "en_US", "KWD12.345"),  # three decimals (fils)
        (-12345, "bhd", "de_DE", "-12,345\xa0BHD"),
        (1000, "iqd", "en_US", "IQD1.000"),  # ISO 4217 says 3; CLDR's cash digits say 0
        (150, "mga", "en_US", "MGA1.50"),  # ISO 4217 says 2; CLDR says 0
        (123456789012, "usd", "en_US", "$1,234,567,890.12"),
        (2**62, "jpy", "en_US", "¥4,611,686,018,427,387,904"),  # exact: no float on the way
        (5000, "zzz", "en_US", "5,000 minor units of ZZZ"),  # unknown: no guessed decimal point
        (5000, "", "en_US", "5,000 minor units of an unknown currency"),
        (5000, "<b>", "en_US", "5,000 minor units of an unknown currency"),
        (7, "xau", "en_US", "7 minor units of XAU"),  # gold has no minor unit
        (12500, "eur", "xx_NOPE", "€125.00"),  # an unknown locale reads as en_US
        (12500, "eur", None, "€125.00"),
    ],
)
def test_minor_units_are_shown_as_money(minor: int, currency: str, locale: str | None, shown: str) -> None:
    assert format_minor(minor, currency, locale) == shown


@pytest.mark.parametrize(
    ("currency", "digits"),
    [("usd", 2), ("JPY", 0), ("krw", 0), ("clp", 0), ("kwd", 3), ("tnd", 3), ("iqd", 3), ("clf", 4), ("zzz", None)],
)
def test_the_exponent_is_iso_4217s(currency: str, digits: int | None) -> None:
    assert exponent(currency) == digits


@pytest.mark.parametrize(
    ("header", "locale"),
    [
        ("de-CH,de;q=0.9,en;q=0.8", "de_CH"),
        ("en;q=0.5, fr-FR;q=0.9", "fr_FR"),  # q-values, not order
        ("xx-YY, ja", "ja"),  # an unknown tag is skipped
        ("", "en_US"),
        ("*", "en_US"),
        ("de;q=0, fr;q=bad", "en_US"),
    ],
)
def test_the_readers_locale_comes_from_accept_language(header: str, locale: str) -> None:
    assert str(reader_locale(header)) == locale


@pytest.mark.parametrize(
    ("environ", "locale"),
    [
        ({"LANG": "de_DE.UTF-8"}, "de_DE"),
        ({"LANG": "de_DE.UTF-8", "LC_MONETARY": "fr_FR.UTF-8"}, "fr_FR"),
        ({"LC_ALL": "ja_JP.UTF-8", "LC_MONETARY": "fr_FR"}, "ja_JP"),
        ({"LANG": "C.UTF-8"}, "en_US"),
        ({"LANG": "POSIX"}, "en_US"),
        ({}, "en_US"),
    ],
)
def test_the_terminals_locale_comes_from_the_environment(environ: dict[str, str], locale: str) -> None:
    assert str(terminal_locale(environ)) == locale


@pytest.mark.parametrize(
    ("value", "minor"),
    [
        *((4200, 4200), (4200.0, 4200), ("4200", 4200), ("-5", -5)),
        *((4200.5, None), ("42.00", None), ("***", None), (True, None), (None, None), ("9" * 20, None)),
    ],
)
def test_minor_units_are_read_from_what_the_wire_carries(value: object, minor: int | None) -> None:
    assert minor_units(value) == minor


@pytest.mark.parametrize(
    ("payload", "ask"),
    [
        (
            {"customer": "cus_marta_ruiz", "amount": "12500", "currency": "eur", "description": "Deposit, #1093"},
            Ask(Money(12500, "EUR"), "cus_marta_ruiz", "Deposit, #1093"),
        ),
        (
            {"amount_money": {"amount": 4200.0, "currency": "USD"}, "customer_id": "C1", "note": "n"},
            Ask(Money(4200, "USD"), "C1", "n"),
        ),
        ({"to": "marta@example.com", "subject": "Your receipt"}, Ask(None, "marta@example.com", "Your receipt")),
        ({"to": ["a@example.com", "b@example.com"]}, Ask(None, "a@example.com, b@example.com", "")),
        ({"amount": "***", "currency": "eur"}, Ask(None, "", "")),  # a masked amount is not guessed
        ({"amount": 300}, Ask(Money(300, ""), "", "")),
        ({}, Ask(None, "", "")),
    ],
)
def test_what_an_action_asks_for(payload: dict[str, object], ask: Ask) -> None:
    assert ask_of(payload) == ask


def test_money_of_a_payload_without_an_amount_is_none() -> None:
    assert money_of({"currency": "eur"}) is None


def test_typed_gives_integers_back_and_keeps_the_rest() -> None:
    story = {"attempt": 0.0, "amount": 4200.0, "rate": 0.5, "ids": [1.0, "2"], "deep": {"n": -3.0}, "ok": True}
    assert typed(story) == {"attempt": 0, "amount": 4200, "rate": 0.5, "ids": [1, "2"], "deep": {"n": -3}, "ok": True}
    assert isinstance(typed(story)["attempt"], int)
    assert typed(1e300) == 1e300  # beyond what a double holds exactly: left alone


def test_a_payloads_amounts_become_integers_and_other_strings_stay() -> None:
    payload = {"amount": "4200", "currency": "eur", "customer": "12345", "amount_money": {"amount": "7"}}
    shown = typed_payload(payload)
    assert shown == {"amount": 4200, "currency": "eur", "customer": "12345", "amount_money": {"amount": 7}}
    assert typed_payload({"amount": "***"}) == {"amount": "***"}  # masked stays masked


def test_the_cli_table_writes_money_in_the_terminals_locale(monkeypatch: pytest.MonkeyPatch) -> None:
    rows: list[dict[str, Any]] = [
        {"action_id": "act_1", "state": "AWAITING_APPROVAL", "tool": "charge_card", "scope": "order:1", "reason": ""}
        | {"payload": {"amount": 12500, "currency": "eur", "customer": "cus_marta_ruiz"}},
        {"action_id": "act_2", "state": "CONFIRMED", "tool": "send_email", "scope": "m:1", "reason": ""}
        | {"payload": {"to": "marta@example.com\x1b[2J"}},
    ]
    for lang, money in (("de_DE.UTF-8", "125,00\xa0€"), ("C.UTF-8", "€125.00")):
        monkeypatch.setenv("LC_ALL", lang)
        render.reader.cache_clear()
        out = io.StringIO()
        render.show(render.table(rows), out)
        lines = out.getvalue().splitlines()
        assert lines[0].split()[:5] == ["ACTION", "STATE", "TOOL", "AMOUNT", "TO"]
        assert money in lines[1] and "cus_marta_ruiz" in lines[1]
        assert "marta@example.com\\x1b[2J" in lines[2]  # agent text escaped, as every column
    render.reader.cache_clear()


def test_a_locale_by_name_or_as_a_locale_gives_the_same_text_every_time() -> None:
    from babel import Locale

    from effectgate.client.money_text.money import format_minor

    by_name = [format_minor(12500, "eur", "de_DE") for _ in range(3)]
    assert by_name == [format_minor(12500, "eur", Locale.parse("de_DE"))] * 3 == ["125,00\xa0€"] * 3
    assert format_minor(12500, "eur", "en_US") == "€125.00"  # another locale, another entry
