"""Store backends are found like adapters: entry points of the `effectgate.stores` group, by URL
scheme. An unknown scheme is refused naming the installed ones; a known backend whose driver is
missing names the extra to install; a third package's backend is served by its scheme."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from effectgate.gateway.config import ConfigError, parse_config
from effectgate.gateway.store import open_store
from effectgate.gateway.store.registry import GROUP, installed
from effectgate.gateway.store.sqlite import SqliteStore

PLUGIN = """
from effectgate.testing import MemoryStore


class UrlMemoryStore(MemoryStore):
    @classmethod
    def from_url(cls, url):
        store = cls()
        store.url = url
        return store
"""


def test_builtin_backends_are_entry_points() -> None:
    assert {"sqlite", "postgresql", "postgres"} <= set(installed())
    assert isinstance(open_store("sqlite:///eg.db"), SqliteStore)


def test_unknown_scheme_lists_the_installed_ones() -> None:
    with pytest.raises(ValueError) as err:
        open_store("mysql://root@127.0.0.1/eg")
    message = str(err.value)
    assert "unsupported store URL scheme 'mysql'" in message
    assert "installed: postgres, postgresql, sqlite" in message and GROUP in message


def test_the_config_refuses_an_unknown_scheme_naming_the_installed_ones() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"store": {"url": "mysql://root@127.0.0.1/eg"}})
    message = str(err.value)
    assert "[store] url" in message and "unsupported scheme 'mysql'" in message
    assert "installed: postgres, postgresql, sqlite" in message


def test_a_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # As in a `pip install effectgate` without the postgres extra: asyncpg cannot be imported.
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    monkeypatch.delitem(sys.modules, "effectgate.gateway.store.postgres", raising=False)
    for scheme in ("postgresql", "postgres"):
        with pytest.raises(ValueError) as err:
            open_store(f"{scheme}://eg@127.0.0.1/eg")
        assert str(err.value) == f"the {scheme!r} store needs the 'asyncpg' package: pip install 'effectgate[postgres]'"


def test_a_third_package_backend_is_found_by_its_scheme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What pip writes for a package declaring `[project.entry-points."effectgate.stores"] memdb = …`.
    (tmp_path / "eg_memdb_store.py").write_text(PLUGIN)
    info = tmp_path / "eg_memdb_store-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: eg-memdb-store\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\nmemdb = eg_memdb_store:UrlMemoryStore\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "eg_memdb_store", raising=False)

    store = open_store("memdb://anything")
    assert type(store).__name__ == "UrlMemoryStore" and getattr(store, "url", "") == "memdb://anything"
    assert parse_config({"store": {"url": "memdb://anything"}}).store_url == "memdb://anything"
    with pytest.raises(ValueError, match="installed: memdb, postgres, postgresql, sqlite"):
        open_store("mysql://x")


def test_a_backend_installed_into_a_folder_on_the_path_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Entry points are read again once a folder on sys.path changed (adapters/plugins.py): the
    # folder is on the path, read without the package, then the package is installed into it.
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "eg_memdb_store", raising=False)
    assert "memdb" not in installed()
    before = tmp_path.stat().st_mtime_ns
    (tmp_path / "eg_memdb_store.py").write_text(PLUGIN)
    info = tmp_path / "eg_memdb_store-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: eg-memdb-store\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\nmemdb = eg_memdb_store:UrlMemoryStore\n")
    # As a later install would leave it: the folder's time a second on (the clock the file system
    # stamps with is coarse, a few milliseconds, and this test is quicker than that).
    os.utime(tmp_path, ns=(before + 1_000_000_000, before + 1_000_000_000))
    assert "memdb" in installed()
    assert type(open_store("memdb://anything")).__name__ == "UrlMemoryStore"
