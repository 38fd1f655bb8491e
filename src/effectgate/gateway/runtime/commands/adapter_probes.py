"""`effectgate check --probe`: one harmless read per adapter that can make one
(`effectgate.adapters.capabilities.ProbesCredentials`), so a wrong key or address is found before
the first agent call rather than after three refused attempts."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from effectgate.adapters import Adapter, AdapterError
from effectgate.adapters.base import CredentialsRefused
from effectgate.adapters.capabilities import ProbesCredentials
from effectgate.gateway.config import Config, ConfigError
from effectgate.gateway.runtime.configured import credentials_setting

PROBE_TIMEOUT = 30.0


async def probe_adapters(config: Config, adapters: Mapping[str, Adapter]) -> list[str]:
    """One line per adapter saying what was checked; the first failure is a `ConfigError` whose
    text is the one line to print (the adapter's message is safe to show: no secret in it)."""
    lines = []
    for name, adapter in sorted(adapters.items()):
        if not isinstance(adapter, ProbesCredentials):
            lines.append(f"probe: [adapters.{name}]: the adapter has no probe: not checked")
            continue
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                what = await adapter.probe()
        except CredentialsRefused as exc:
            where = credentials_setting(name, config.adapters[name])
            raise ConfigError(
                f"{config.source}: [adapters.{name}] probe failed: {exc.message}: the provider refused the key "
                f"set by {where}"
            ) from None
        except AdapterError as exc:
            raise ConfigError(f"{config.source}: [adapters.{name}] probe failed: {exc.message}") from None
        except TimeoutError:
            raise ConfigError(
                f"{config.source}: [adapters.{name}] probe failed: no answer in {PROBE_TIMEOUT:g}s"
            ) from None
        lines.append(f"probe: [adapters.{name}]: OK: {what}")
    return lines
