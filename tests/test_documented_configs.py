"""Every config the documentation shows passes `effectgate check` (a real subprocess: secrets
resolved, adapters built, the store opened). Fragments are checked on top of a minimal config,
so a documented key that the schema does not know fails here, not in a user's terminal. The
processes are forks of one that loaded the command line once (tests/cli_forks.py), but for the
first config's, a `python -m effectgate.gateway` process of its own (the whole command's wiring)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from effectgate_lab.chaos.config_writer import write_config
from tests import pg
from tests.cli_forks import CliForks
from tests.tls_certs import Pki, make_pki

ROOT = Path(__file__).resolve().parent.parent
BASE: dict[str, Any] = {
    "server": {"listen": "127.0.0.1:0"},
    "adapters": {"stripe": {"api_base": "http://127.0.0.1:9", "api_key_env": "STRIPE_API_KEY"}},
    "tools": {"charge_card": {"adapter": "stripe"}},
}
# What a [[notify]] sink's `<key>_env` must hold to be read as one.
NOTIFY_SECRETS = {"secret_env": "whsec_" + "ZHVtbXktbm90aWZ5LXNlY3JldA==", "url_env": "http://127.0.0.1:9/slack"}
# Documented adapters that ship in other packages: their block must fail with this message.
NOT_INSTALLED = {"acme": "no adapter of kind 'acme' is installed"}


def documented() -> dict[str, str]:
    """id -> TOML text of every ```toml block in README.md and docs/, and docs/examples/*.toml."""
    found: dict[str, str] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        blocks = re.findall(r"^```toml\n(.*?)^```", path.read_text(), re.M | re.S)
        for index, block in enumerate(blocks, 1):
            if "project" not in tomllib.loads(block):  # pyproject.toml excerpts are not configs
                found[f"{path.relative_to(ROOT)}#{index}"] = block
    for path in sorted((ROOT / "docs").rglob("*.toml")):
        found[str(path.relative_to(ROOT))] = path.read_text()
    return found


DOCUMENTED = documented()


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def localize(doc: dict[str, Any], tmp_path: Path, pki: Pki, pg_url: str, env: dict[str, str]) -> None:
    """Points the documented paths, URLs and secrets at this machine's test equivalents."""
    tls = doc.get("server", {}).get("tls")
    if tls:
        files = {"cert_file": pki.server_cert, "key_file": pki.server_key, "client_ca_file": pki.ca}
        doc["server"]["tls"] = {k: str(files[k]) for k in tls}
    url = doc.get("store", {}).get("url", "")
    if url.startswith("postgres"):
        doc["store"]["url"] = pg_url
    elif url.startswith("sqlite:////"):
        doc["store"]["url"] = f"sqlite:///{tmp_path}/abs.db"
    tables = list(doc.get("adapters", {}).values())
    while tables:  # nested tables too (an adapter's `webhook` table names its own secret)
        table = tables.pop()
        for key, value in list(table.items()):
            if isinstance(value, dict):
                tables.append(value)
            elif key.endswith("_env"):
                env[str(value)] = f"dummy-secret-{key}"
            elif key.endswith("_file"):
                secret = tmp_path / f"{key}.txt"
                secret.write_text("dummy-secret\n")
                table[key] = str(secret)
    for sink in doc.get("notify", []):  # [[notify]]: a signing secret, a Slack URL, a password
        for key, value in list(sink.items()):
            if key.endswith("_env"):
                env[str(value)] = NOTIFY_SECRETS.get(key, f"dummy-secret-{key}")


async def effectgate(
    forks: CliForks, own_process: bool, *argv: str, cwd: Path, env: dict[str, str]
) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `effectgate *argv`: a process of its own, or a fork."""
    if not own_process:
        done = await asyncio.to_thread(forks.run, *argv, env=env, cwd=cwd)
        return done.returncode, done.stdout, done.stderr
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", *argv,
        cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_the_docs_show_configs() -> None:
    assert len(DOCUMENTED) >= 8, sorted(DOCUMENTED)
    assert any("[[principals]]" in text and "[server.tls]" in text for text in DOCUMENTED.values())


@pytest.mark.parametrize("name", list(DOCUMENTED))
async def test_every_documented_config_passes_check(
    name: str, tmp_path: Path, pki: Pki, forks: CliForks, request: pytest.FixtureRequest
) -> None:
    own_process = name == next(iter(DOCUMENTED))
    doc = merge(BASE, tomllib.loads(DOCUMENTED[name]))
    env = {**os.environ, "STRIPE_API_KEY": "dummy-stripe-key"}
    pg_url, database = "", ""
    if doc.get("store", {}).get("url", "").startswith("postgres"):
        admin = request.getfixturevalue("pg_admin_dsn")
        database, pg_url = await pg.create_database(admin)
    try:
        localize(doc, tmp_path, pki, pg_url, env)
        config = write_config(doc, tmp_path / "effectgate.toml")
        if doc.get("store", {}).get("migrate") == "never":  # the documented order: migrate, then check
            migrated = await effectgate(forks, own_process, "migrate", "--config", str(config), cwd=tmp_path, env=env)
            assert migrated[0] == 0, migrated
        code, out, err = await effectgate(forks, own_process, "check", "--config", str(config), cwd=tmp_path, env=env)
    finally:
        if database:
            await pg.drop_database(request.getfixturevalue("pg_admin_dsn"), database)
    kinds = {str(t.get("kind", n)) for n, t in doc.get("adapters", {}).items()}
    expected_failures = [NOT_INSTALLED[k] for k in kinds & set(NOT_INSTALLED)]
    if expected_failures:
        assert code == 2 and expected_failures[0] in err, err
        return
    assert code == 0, f"{name}:\n{DOCUMENTED[name]}\n{err}"
    assert "OK" in out
