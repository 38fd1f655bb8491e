"""Finding adapters: every adapter is an entry point in the `effectgate.adapters` group.

A provider ships as its own package by declaring, in its pyproject.toml:

    [project.entry-points."effectgate.adapters"]
    myprovider = "my_package.adapter:MyAdapter"

The config then names it: `[adapters.NAME]` with `kind = "myprovider"` (the kind defaults to
NAME, so `[adapters.stripe]` needs no `kind`). Several tables may share one kind (two HTTP APIs
through the generic `http` adapter).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint
from typing import Any

from effectgate.adapters import plugins
from effectgate.adapters.base import Adapter, ConfigError

GROUP = "effectgate.adapters"


def installed() -> dict[str, EntryPoint]:
    """The adapter kinds installed now, by name (plugins.read: a package installed meanwhile counts)."""
    return plugins.installed(GROUP)


# The provider libraries of the built-in adapters come with an extra of the effectgate package.
EXTRAS = {
    "stripe": "stripe",
    "aiohttp": "stripe",
    "aiosmtplib": "smtp",
    "mcp": "mcp",
    "mcp_types": "mcp",
    "jsonschema": "mcp",
}


ADAPTERS = plugins.Plugins[Adapter](
    GROUP,
    Adapter,
    label=lambda kind: f"adapter {kind!r}",
    unknown=lambda kind, names: (
        f"no adapter of kind {kind!r} is installed (installed: {', '.join(names) or 'none'}); "
        f"install the package that declares it in the {GROUP!r} entry-point group"
    ),
    extras=EXTRAS,
)


def adapter_class(kind: str) -> type[Adapter]:
    """The adapter class registered under `kind` (only that entry point is loaded); a ConfigError
    names what is installed, or which extra brings a missing provider library."""
    try:
        return ADAPTERS.load(kind)
    except plugins.PluginNotLoaded as exc:
        raise ConfigError(str(exc), key="kind") from exc.__cause__


def build_adapter(name: str, settings: Mapping[str, Any]) -> Adapter:
    """Builds the adapter of the `[adapters.NAME]` table; `kind` defaults to NAME.

    Every failure is a `ConfigError` whose `table` is `adapters.NAME`.
    """
    try:
        kind = str(settings.get("kind") or name)
        own = {k: v for k, v in settings.items() if k != "kind"}
        return adapter_class(kind).from_settings(name, own)
    except ConfigError as exc:
        exc.table = exc.table or f"adapters.{name}"
        raise
