"""Durations in the config, the same grammar as the operator CLI's flags: a number of seconds,
or numbers with units `ms`, `s`, `m`, `h`, `d`, one or several together (`1h30m`,
`2m30s`, `500ms`). tests/test_durations.py checks that both parse the same table."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

from effectgate.adapters.base import ConfigError

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
EXAMPLES = "'2s', '500ms', '1h30m'"


def parse_duration(value: object, key: str = "") -> float:
    """'2s', '500ms', '1h30m', '30d' or a number of seconds -> seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(f"{key}: a duration must not be negative".lstrip(": "))
        return float(value)
    text = str(value).strip().lower().replace(" ", "")
    seconds = _seconds(text)
    if seconds is None:
        raise ConfigError(f"{key}: {value!r} is not a duration (e.g. {EXAMPLES})".lstrip(": "))
    return seconds


def _seconds(text: str) -> float | None:
    try:
        plain = float(text)
    except ValueError:
        pass
    else:
        return plain if plain >= 0 else None
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def _duration(value: object) -> float:
    try:
        return parse_duration(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None  # pydantic adds the key path


Duration = Annotated[float, BeforeValidator(_duration)]
