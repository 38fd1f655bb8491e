"""Keeping secrets out of the text an adapter puts in errors and evidence.

Provider replies are echoed into error messages to help operators, and a provider may echo back
what it received; so every echoed text goes through `scrub` with the adapter's secrets first.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_ECHO = 300


def scrub(text: str, secrets: Iterable[str], limit: int = MAX_ECHO) -> str:
    """`text` cut to `limit` characters with every occurrence of a secret replaced by `***`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text if len(text) <= limit else text[:limit] + "…"
