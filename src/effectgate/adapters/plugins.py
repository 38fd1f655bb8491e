"""The one plug-in loader: a class found by name in an entry-point group, loaded alone, checked to
be what the group promises. Adapters (registry.py, by kind) and store backends
(gateway/store/registry.py, by URL scheme) are both found this way; each says its own words."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, EntryPoints, entry_points
from typing import Generic, Protocol, TypeVar, cast

T = TypeVar("T")


class _Groups(Protocol):
    """What `entry_points()` answers: every group's entry points (SelectableGroups on 3.11)."""

    def select(self, *, group: str) -> EntryPoints: ...


# The last reading of every installed entry point, with the sys.path it was read on (see `read`).
_last: tuple[tuple[tuple[str, int], ...], _Groups] | None = None


class PluginNotLoaded(Exception):
    """The plug-in is not installed, or did not load: the message is the one line to show."""


def _path_state() -> tuple[tuple[str, int], ...]:
    """sys.path, each folder with its modification time: installing or removing a package adds or
    removes a folder (its dist-info) in one of them."""
    state: list[tuple[str, int]] = []
    for entry in sys.path:
        try:
            folder = entry or os.getcwd()  # "": the working directory, wherever it is now
            state.append((folder, os.stat(folder).st_mtime_ns))
        except OSError:  # not there (yet), or the working directory was removed
            state.append((entry, -1))
    return tuple(state)


def read(group: str) -> EntryPoints:
    """The entry points of `group` installed now.

    Read afresh whenever sys.path or a folder on it changed since the last reading, so a package
    installed while the process runs is seen too; else the last reading's. (Each reading opens
    every installed package's metadata, about ten milliseconds of CPU, and a start asks for several
    groups: commands, adapters, stores.)
    """
    global _last
    state = _path_state()
    if _last is None or _last[0] != state:
        _last = (state, entry_points())
    return _last[1].select(group=group)


def installed(group: str) -> dict[str, EntryPoint]:
    """The plug-ins of `group` installed now, by name (`read`)."""
    found: dict[str, EntryPoint] = {}
    for ep in read(group):
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
