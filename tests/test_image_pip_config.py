"""scripts/image_pip_config.py: the host's pip configuration as the image's build secrets — how
pip reaches an index (later files and PIP_* variables win), the CA bundle copied and named at the
secret's mount point, and nothing that names the host's disk."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "image_pip_config.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_pip_config", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_network_settings_pass_and_the_hosts_paths_do_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PIP_"):
            monkeypatch.delenv(name)
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nproxy CA\n-----END CERTIFICATE-----\n")
    system, user = tmp_path / "system.conf", tmp_path / "user.conf"
    system.write_text(f"[global]\ncert = {ca}\nconstraint = /etc/xdg/pip/constraints.txt\ntimeout = 60\n")
    user.write_text(
        "[global]\nfind-links = /opt/wheels\n"
        "extra-index-url = file:///opt/pypi/simple https://mirror.example/simple\n"
        "[install]\ntrusted-host = mirror.example\n"
    )
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "180")
    load().write(tmp_path / "out", [system, user, tmp_path / "missing.conf"])

    conf = (tmp_path / "out" / "pip.conf").read_text().splitlines()
    assert conf == [
        "[global]",
        "cert = /run/secrets/pip-cert",
        "timeout = 180",
        "extra-index-url = https://mirror.example/simple",
        "trusted-host = mirror.example",
    ]
    assert (tmp_path / "out" / "pip-cert").read_text() == ca.read_text()


def test_without_a_configuration_the_secrets_are_empty_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("PIP_"):
            monkeypatch.delenv(name)
    load().write(tmp_path / "out", [])
    assert (tmp_path / "out" / "pip.conf").read_text() == "[global]\n"
    assert (tmp_path / "out" / "pip-cert").read_bytes() == b""
