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
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from effectgate.adapters.base import Adapter, ConfigError

GROUP = "effectgate.adapters"


def installed() -> dict[str, EntryPoint]:
    """The adapter kinds installed now, by name.

    Read afresh at each call (importlib.metadata scans sys.path), so a package installed while
    the process runs is seen too.
    """
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        # With the same package visible twice on sys.path the first one wins, like imports do.
        found.setdefault(ep.name, ep)
    return found


# The provider libraries of the built-in adapters come with an extra of the effectgate package.
EXTRAS = {
    "stripe": "stripe",
    "aiohttp": "stripe",
    "aiosmtplib": "smtp",
    "mcp": "mcp",
    "mcp_types": "mcp",
    "jsonschema": "mcp",
}


def adapter_class(kind: str) -> type[Adapter]:
    """The adapter class registered under `kind` (only that entry point is loaded); a ConfigError
    names what is installed, or which extra brings a missing provider library."""
    available = installed()
    ep = available.get(kind)
    if ep is None:
        names = ", ".join(sorted(available)) or "none"
        raise ConfigError(
            f"no adapter of kind {kind!r} is installed (installed: {names}); "
            f"install the package that declares it in the {GROUP!r} entry-point group",
            key="kind",
        )
    try:
        cls = ep.load()
    except ModuleNotFoundError as exc:
        root = (exc.name or "").partition(".")[0]
        extra = EXTRAS.get(root)
        if extra is not None:
            raise ConfigError(
                f"adapter {kind!r} needs the {root!r} package: pip install 'effectgate[{extra}]'", key="kind"
            ) from None
        raise ConfigError(f"adapter {kind!r} ({ep.value}) needs the missing module {exc.name!r}", key="kind") from None
    except Exception as exc:  # an import error in a plugin must name the plugin
        raise ConfigError(f"adapter {kind!r} ({ep.value}) failed to load: {exc!r}", key="kind") from exc
    if not (isinstance(cls, type) and issubclass(cls, Adapter)):
        raise ConfigError(f"adapter {kind!r} ({ep.value}) is not an effectgate Adapter subclass", key="kind")
    return cls


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
