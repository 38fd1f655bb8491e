"""Provider secrets: read from the environment variable or file the config names, and remembered.

Every value read here is kept in a process-wide registry (`resolved_secrets()`), so whatever
leaves the gateway (provider bodies in receipts, evidence and reasons, log records) can be
scrubbed of every configured secret, not only of the one adapter's own.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from effectgate.adapters.base import ConfigError

_lock = threading.Lock()
_resolved: frozenset[str] = frozenset()


def register_secret(value: str) -> None:
    """Adds `value` to the registry of secrets to scrub (empty values are ignored)."""
    global _resolved
    if value:
        with _lock:
            _resolved = _resolved | {value}


def resolved_secrets() -> frozenset[str]:
    """Every secret any adapter of this process has read (for scrubbing and log redaction)."""
    return _resolved


def read_secret(settings: Mapping[str, Any], key: str, *, required: bool = True, register: bool = True) -> str:
    """The secret that `<key>_env` or `<key>_file` in `settings` points at, registered for
    scrubbing unless `register` is false (a user name read the same way is no secret, and masking
    a word like "apikey" everywhere would only garble logs).

    A named variable that is unset or empty, or a named file that is unreadable or empty, is a
    ConfigError whether or not the secret is required: a config that names a credential means it
    (an adapter must never quietly send requests without the auth it was given). Agents never
    supply secrets; the config only names where they live.
    """
    env_name = settings.get(f"{key}_env")
    file_name = settings.get(f"{key}_file")
    if env_name and file_name:
        raise ConfigError(f"give either {key}_env or {key}_file, not both", key=f"{key}_env")
    if env_name:
        value = os.environ.get(str(env_name), "")
        if not value:
            raise ConfigError(f"environment variable {env_name} is not set (or empty)", key=f"{key}_env")
    elif file_name:
        try:
            value = Path(str(file_name)).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read {file_name}: {exc.strerror}", key=f"{key}_file") from None
        if not value:
            raise ConfigError(f"{file_name} is empty", key=f"{key}_file")
    elif required:
        raise ConfigError(f"set {key}_env or {key}_file", key=key)
    else:
        return ""
    if register:
        register_secret(value)
    return value


# Provider libraries log what must not be logged: httpx every request URL at INFO (URLs carry
# payload values), httpcore every response header at DEBUG (a provider may echo a credential),
# stripe request details. Adapters that use them quieten them unless the operator chose a level.
TRANSPORT_LOGGERS = ("httpx", "httpcore", "aiohttp", "stripe")


def quiet_transport_loggers() -> None:
    """Sets the provider libraries' loggers to WARNING, unless a level was configured for them."""
    for name in TRANSPORT_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
