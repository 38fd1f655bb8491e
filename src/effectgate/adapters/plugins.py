"""The one plug-in loader: a class found by name in an entry-point group, loaded alone, checked to
be what the group promises. Adapters (registry.py, by kind) and store backends
(gateway/store/registry.py, by URL scheme) are both found this way; each says its own words."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar, cast

T = TypeVar("T")


class PluginNotLoaded(Exception):
    """The plug-in is not installed, or did not load: the message is the one line to show."""


def installed(group: str) -> dict[str, EntryPoint]:
    """The plug-ins of `group` installed now, by name.

    Read afresh at each call (importlib.metadata scans sys.path), so a package installed while
    the process runs is seen too.
    """
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        # With the same package visible twice on sys.path the first one wins, like imports do.
        found.setdefault(ep.name, ep)
    return found


@dataclass(frozen=True)
class Plugins(Generic[T]):
    """The plug-ins of one entry-point group, each a subclass of `base`."""

    group: str
    # The class every plug-in must subclass (plain `type`: it may be abstract).
    base: type
    # What a plug-in named `name` is called in a message ("adapter 'stripe'", "the 'mydb' store").
    label: Callable[[str], str]
    # The message when `name` is not installed, given the names that are.
    unknown: Callable[[str, list[str]], str]
    # The extra of the effectgate package that brings a missing provider library, by its top module.
    extras: Mapping[str, str]

    def load(self, name: str) -> type[T]:
        """The class registered under `name` (only that entry point is loaded); raises
        `PluginNotLoaded` naming what is installed, or which extra brings a missing library."""
        available = installed(self.group)
        ep = available.get(name)
        if ep is None:
            raise PluginNotLoaded(self.unknown(name, sorted(available)))
        label = self.label(name)
        try:
            cls = ep.load()
        except ModuleNotFoundError as exc:
            root = (exc.name or "").partition(".")[0]
            extra = self.extras.get(root)
            if extra is not None:
                raise PluginNotLoaded(
                    f"{label} needs the {root!r} package: pip install 'effectgate[{extra}]'"
                ) from None
            raise PluginNotLoaded(f"{label} ({ep.value}) needs the missing module {exc.name!r}") from None
        except Exception as exc:  # an import error in a plugin must name the plugin
            raise PluginNotLoaded(f"{label} ({ep.value}) failed to load: {exc!r}") from exc
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise PluginNotLoaded(f"{label} ({ep.value}) is not an effectgate {self.base.__name__} subclass")
        return cast("type[T]", cls)
