"""Reading provider secrets named in the config: from an environment variable or a file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from effectgate.adapters.base import ConfigError

# Every secret resolved in this process, so the gateway's log filter can redact it.
_resolved: set[str] = set()


def resolved_secrets() -> frozenset[str]:
    """The secret values `read_secret` returned so far (for log redaction)."""
    return frozenset(_resolved)


def read_secret(settings: Mapping[str, Any], key: str, *, required: bool = True) -> str:
    """Returns the secret that `<key>_env` or `<key>_file` in `settings` points at.

    Agents never supply secrets; the config only names where they live.
    """
    env_name = settings.get(f"{key}_env")
    file_name = settings.get(f"{key}_file")
    if env_name:
        value = os.environ.get(str(env_name))
        if value:
            _resolved.add(value)
            return value
        if required:
            raise ConfigError(f"environment variable {env_name} (for {key}) is not set")
    elif file_name:
        try:
            secret = Path(str(file_name)).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read {key} file {file_name}: {exc.strerror}") from None
        if secret:
            _resolved.add(secret)
        return secret
    elif required:
        raise ConfigError(f"set {key}_env or {key}_file")
    return ""
