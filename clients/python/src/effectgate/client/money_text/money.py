"""Money as people read it: an amount in a currency's minor units (what tools and providers carry:
cents, yen, fils) shown with the currency's ISO 4217 exponent in the reader's locale, by Babel
(CLDR's symbols, separators and patterns). `5000 jpy` is ¥5,000 and `5000 usd` is $50.00 in
English; 12500 eur is 125,00 € in German.

An unknown currency is never given a guessed decimal point: its amount is shown in minor units,
with the code, so nobody misreads it by a factor of 100."""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from babel import Locale

# Babel is imported by the functions that format, not here: importing it (and CLDR's data) costs
# a CLI command a few hundred milliseconds, which the commands that print no money never pay.

DEFAULT_LOCALE = "en_US"
_CODE = re.compile(r"[A-Za-z]{3}")

# Where CLDR's `digits` (what Babel knows) follow cash practice, not ISO 4217's minor unit: the
# ISO exponent wins, because the amounts are in ISO minor units (Stripe's, Square's).
ISO_EXPONENTS = {
    **dict.fromkeys(("AFN", "ALL", "IRR", "KPW", "LAK", "LBP", "MGA", "MMK", "RSD", "SLL", "SOS", "SYP", "YER"), 2),
    "IQD": 3,
}
# ISO 4217 codes with no minor unit at all (metals, units of account, the test codes).
NO_MINOR_UNIT = frozenset({"XAU", "XAG", "XPD", "XPT", "XDR", "XSU", "XUA", "XBA", "XBB", "XBC", "XBD", "XTS", "XXX"})


@dataclass(frozen=True)
class Money:
    """An amount in minor units of a currency, as the payload carried it."""

    minor: int
    currency: str  # upper case, as given (may be unknown)

    def text(self, locale: Locale | str | None = None) -> str:
        return format_minor(self.minor, self.currency, locale)


def exponent(currency: str) -> int | None:
    """ISO 4217's minor-unit exponent of the currency; None when the code is not a currency Babel
    knows (then nobody can say where the decimal point goes)."""
    from babel.numbers import get_currency_precision, is_currency

    code = currency.upper()
    if not _CODE.fullmatch(code) or code in NO_MINOR_UNIT or not is_currency(code):
        return None
    return ISO_EXPONENTS.get(code, get_currency_precision(code))


def locale_of(name: Locale | str | None) -> Locale:
    """A Babel locale; POSIX and unknown names read as en_US."""
    from babel import Locale, UnknownLocaleError

    if isinstance(name, Locale):
        return name
    try:
        found = Locale.parse(name or DEFAULT_LOCALE)
    except (UnknownLocaleError, ValueError, TypeError):
        return Locale.parse(DEFAULT_LOCALE)
    return Locale.parse(DEFAULT_LOCALE) if found.variant == "POSIX" else found


def format_minor(minor: int, currency: str, locale: Locale | str | None = None) -> str:
    """`format_minor(12500, "eur")` -> "€125.00"; an unknown currency -> "12,500 minor units of ZZZ"."""
    # Babel's parsing and formatting cost ~0.1 ms, paid for every message a notify pass builds:
    # the same amounts come again and again, so a locale given by name is answered from a cache.
    if locale is None or isinstance(locale, str):
        return _format_named(minor, currency, locale)
    return _format(minor, currency, locale)


@functools.lru_cache(maxsize=4096)
def _format_named(minor: int, currency: str, locale: str | None) -> str:
    return _format(minor, currency, locale)


def _format(minor: int, currency: str, locale: Locale | str | None) -> str:
    from babel.numbers import format_decimal, parse_pattern

    where = locale_of(locale)
    digits = exponent(currency)
    if digits is None:
        code = currency.upper() if _CODE.fullmatch(currency) else "an unknown currency"
        return f"{format_decimal(minor, locale=where)} minor units of {code}"
    value = Decimal(minor).scaleb(-digits)
    # The locale's currency pattern with the ISO exponent's fraction digits (not CLDR's).
    pattern = copy.copy(parse_pattern(where.currency_formats["standard"]))
    pattern.frac_prec = (digits, digits)
    shown: str = pattern.apply(value, where, currency=currency.upper(), currency_digits=False)
    return shown


def reader_locale(accept_language: str, fallback: str = DEFAULT_LOCALE) -> Locale:
    """The first locale of an HTTP Accept-Language header that CLDR knows (q-values honoured)."""
    from babel import Locale, UnknownLocaleError

    ranked: list[tuple[float, int, str]] = []
    for index, part in enumerate(accept_language.split(",")[:20]):  # a header is the browser's, bounded
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                quality = 0.0
        if tag and tag != "*" and quality > 0:
            ranked.append((-quality, index, tag))
    for _, _, tag in sorted(ranked):
        try:
            return Locale.parse(tag, sep="-")
        except (UnknownLocaleError, ValueError):
            continue
    return locale_of(fallback)


def terminal_locale(environ: Mapping[str, str] | None = None) -> Locale:
    """The terminal reader's locale: LC_ALL, LC_MONETARY, LANG (as POSIX orders them); C/POSIX
    and unknown names read as en_US."""
    env = os.environ if environ is None else environ
    for key in ("LC_ALL", "LC_MONETARY", "LANG"):
        value = env.get(key, "")
        if value:
            name = value.split(".")[0].split("@")[0]
            return locale_of(None if name in ("C", "POSIX") else name)
    return locale_of(None)
