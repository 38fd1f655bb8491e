"""Keeping secrets out of the text an adapter puts in errors, receipts and evidence.

Provider replies are echoed into errors to help operators, stored in receipts and returned to
agents, and a provider may echo back what it received (in a body or a header). So every provider
text goes through `scrub` (and every provider document through `scrub_json`) with the configured
secrets first, and only then is it cut to size: a cut first could leave most of a key behind.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

MAX_ECHO = 300
MASK = "***"


@functools.lru_cache(maxsize=256)
def _forms(secret: str) -> tuple[str, ...]:
    # The secret as sent, as JSON strings escape it (some encoders escape "/" too), and as a URL
    # encodes it.
    escaped = json.dumps(secret)[1:-1]
    forms = {secret, escaped, escaped.replace("/", "\\/"), quote(secret, safe="")}
    return tuple(sorted(forms, key=len, reverse=True))


def scrub(text: str, secrets: Iterable[str], limit: int | None = MAX_ECHO) -> str:
    """`text` with every occurrence of a secret replaced by `***`, then cut to `limit` characters."""
    for secret in secrets:
        if secret:
            for form in _forms(secret):
                if form in text:
                    text = text.replace(form, MASK)
    return text if limit is None or len(text) <= limit else text[:limit] + "…"


def scrub_json(doc: Any, secrets: Iterable[str]) -> Any:
    """A JSON document with every secret removed from its strings (keys too); never truncated."""
    found = [s for s in secrets if s]
    if not found:
        return doc

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return scrub(node, found, limit=None)
        if isinstance(node, dict):
            return {walk(str(k)): walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(doc)
