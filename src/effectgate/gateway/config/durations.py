"""Durations in the config: '2s', '500ms', '5m', '1h', '30d' or a number of seconds."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

from effectgate.adapters.base import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: object, key: str = "") -> float:
    """'2s', '500ms', '5m', '1h', '30d' or a number of seconds -> seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(f"{key}: a duration must not be negative".lstrip(": "))
        return float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ConfigError(f"{key}: {value!r} is not a duration (e.g. '2s', '500ms', '1h')".lstrip(": "))
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _duration(value: object) -> float:
    try:
        return parse_duration(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None  # pydantic adds the key path


Duration = Annotated[float, BeforeValidator(_duration)]
