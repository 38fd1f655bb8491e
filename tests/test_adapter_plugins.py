"""A third adapter package, outside effectgate/adapters, is found through its entry point.

The package (tests/plugins/eg_echo_adapter) is really installed, by pip from its own pyproject,
into a temporary directory that is then put on sys.path: discovery reads the dist-info pip wrote,
exactly as for a package installed in site-packages, without touching the venv.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import struct_pb2

from effectgate.adapters.base import ActionCall, ConfigError, Outcome
from effectgate.adapters.registry import adapter_class, build_adapter, installed

PLUGIN = Path(__file__).parent / "plugins" / "eg_echo_adapter"


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("plugin")
    source = work / "src"
    shutil.copytree(PLUGIN, source)  # pip builds in place; keep the repository clean
    site = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(site), str(source)],
        check=True,
        timeout=120,
    )  # fmt: skip
    return site


@pytest.fixture
def with_plugin(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(plugin_site))
    yield
    sys.modules.pop("eg_echo_adapter", None)


def test_builtin_adapters_are_entry_points() -> None:
    assert {"stripe", "postmark", "smtp", "http"} <= set(installed())


def test_unknown_kind_lists_what_is_installed() -> None:
    with pytest.raises(ConfigError) as err:
        adapter_class("echo")
    assert "no adapter of kind 'echo'" in str(err.value)
    listed = str(err.value).split("installed: ", 1)[1]
    assert all(kind in listed for kind in ("http", "postmark", "smtp", "stripe"))


def test_kind_defaults_to_the_table_name_and_may_repeat() -> None:
    a = build_adapter("crm_a", {"kind": "http", "request": {"url": "http://127.0.0.1:9/a"}})
    b = build_adapter("crm_b", {"kind": "http", "request": {"url": "http://127.0.0.1:9/b"}})
    assert type(a) is type(b) is adapter_class("http")
    with pytest.raises(ConfigError, match="kind 'crm_c'"):
        build_adapter("crm_c", {"request": {"url": "/x"}})


async def test_third_party_package_is_discovered(with_plugin: None) -> None:
    cls = adapter_class("echo")
    assert cls.__module__ == "eg_echo_adapter"
    assert Path(sys.modules["eg_echo_adapter"].__file__ or "").is_relative_to(sys.path[0])
    adapter = build_adapter("echo_main", {"kind": "echo"})
    payload = struct_pb2.Struct()
    payload.update({"hello": "world"})
    call = ActionCall("act_1", "key_1", payload, scope="s", tool="echo", tenant="t")
    assert (await adapter.verify(call)).outcome is Outcome.NOT_FOUND
    receipt = await adapter.execute(call)
    assert receipt.result == {"hello": "world"}
    assert (await adapter.verify(call)).outcome is Outcome.CONFIRMED


def test_the_plugin_api_is_reexported_and_imports_no_provider_library() -> None:
    import effectgate.adapters as api

    assert {"Adapter", "AdapterSettings", "parse_settings", "RateLimited", "scrub", "resolved_secrets"} <= set(
        api.__all__
    )
    assert all(hasattr(api, name) for name in api.__all__)
    # In a fresh interpreter: the API and an http adapter load neither stripe nor aiosmtplib.
    probe = (
        "import sys; import effectgate.adapters as a; "
        "a.build_adapter('crm', {'kind': 'http', 'request': {'url': 'http://127.0.0.1:9/a'}}); "
        "print(sorted(m for m in ('stripe', 'aiosmtplib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize(("kind", "library", "extra"), [("stripe", "stripe", "stripe"), ("smtp", "aiosmtplib", "smtp")])
def test_a_missing_provider_library_names_the_extra(
    kind: str, library: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the extra were not installed: importing the library fails.
    monkeypatch.setitem(sys.modules, library, None)
    for name in [m for m in sys.modules if m.startswith(f"effectgate.adapters.{kind}")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ConfigError) as err:
        build_adapter(kind, {"kind": kind, "host": "x"})
    assert str(err.value) == (
        f"adapters.{kind}.kind: adapter {kind!r} needs the {library!r} package: pip install 'effectgate[{extra}]'"
    )
