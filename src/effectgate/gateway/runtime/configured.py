"""The parts a gateway is made of, built from its config: the adapters (validated by each one),
the tools bound to them with their limits compiled, the store; and what the config's tools are
checked against once the store's read lags are known (`window_problems`). Shared by the server,
`effectgate serve` and `effectgate audit`; each error names the config file and its table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from effectgate.adapters.base import Adapter
from effectgate.adapters.registry import build_adapter
from effectgate.gateway.config import Config, ConfigError
from effectgate.gateway.core import BoundTool, LagBook, PolicyError
from effectgate.gateway.store import Store, open_store


def build_adapters(config: Config) -> dict[str, Adapter]:
    """Every [adapters.NAME] table, each validated by its adapter; errors name the file and table."""
    built: dict[str, Adapter] = {}
    for name in sorted(config.adapters):
        try:
            built[name] = build_adapter(name, config.adapters[name])
        except ConfigError as exc:
            # The table once, in TOML's words: `[adapters.stripe] api_bse: unknown key`.
            key = exc.key or ""
            reason = exc.reason.removeprefix(f"adapters.{name}.").removeprefix(f"adapters.{name}: ")
            where = f"[adapters.{name}] {key}:" if key else f"[adapters.{name}]"
            raise ConfigError(f"{config.source}: {where} {reason}") from exc
        except (ValueError, TypeError) as exc:
            message = str(exc).removeprefix(f"adapters.{name}: ").removeprefix(f"{name}: ")
            raise ConfigError(f"{config.source}: [adapters.{name}] {message}") from exc
    return built


def credentials_setting(name: str, table: Mapping[str, object]) -> str:
    """Where `[adapters.NAME]` takes its secrets from, in the file's words:
    `[adapters.stripe] api_key_env = "STRIPE_API_KEY"` (the `<key>_env` / `<key>_file` keys)."""
    named = [
        f"{key} = {value!r}".replace("'", '"')
        for key, value in sorted(table.items())
        if key.endswith(("_env", "_file")) and isinstance(value, str) and "webhook" not in key
    ]
    return f"[adapters.{name}] {', '.join(named)}" if named else f"[adapters.{name}]"


def bind_tools(config: Config, adapters: Mapping[str, Adapter], lags: LagBook | None = None) -> dict[str, BoundTool]:
    """The configured tools, each with its limits compiled: a rule that does not compile or a
    field the payload does not have is a ConfigError naming the tool (one line)."""
    tools = {
        name: BoundTool(
            tool, adapters[tool.adapter], lags, credentials_setting(tool.adapter, config.adapters[tool.adapter])
        )
        for name, tool in config.tools.items()
    }
    for name, tool in tools.items():
        try:
            tool.policy  # noqa: B018 (compiles it)
        except PolicyError as exc:
            raise ConfigError(f"{config.source}: [tools.{name}.limits] {exc}") from None
    return tools


async def close_adapters(adapters: dict[str, Adapter]) -> None:
    for adapter in adapters.values():
        with contextlib.suppress(Exception):
            await adapter.close()


def open_configured_store(config: Config) -> Store:
    try:
        store = open_store(config.store_url)
    except ValueError as exc:
        raise ConfigError(f"{config.source}: [store] url: {exc}") from None
    store.migrate_on_open = config.store.migrate == "auto"
    return store


def window_problems(tools: Mapping[str, BoundTool], lags: LagBook) -> list[str]:
    """Tools whose configured consistency window is shorter than the observed p99 read lag."""
    problems = []
    for name, tool in sorted(tools.items()):
        key, configured = tool.lag_key, tool.config.consistency_window
        n = lags.count(key)
        p99 = lags.quantile(key, 0.99)
        if n >= lags.settings.min_samples and isinstance(configured, float) and configured < p99:
            problems.append(
                f"[tools.{name}] consistency_window {configured:g}s is shorter than the observed p99 read lag "
                f"{p99:.3f}s of {key} (p50 {lags.quantile(key, 0.5):.3f}s, {n} samples): a read-back may take a "
                'write that is not visible yet for absence; raise it, or set consistency_window = "auto"'
            )
    return problems


def tenants_of(config: Config) -> list[str]:
    """The tenants whose actions the gateway serves (development mode: "dev")."""
    return sorted({p.tenant for p in config.principals} or {"dev"})
