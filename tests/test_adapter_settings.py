"""One settings parser for every adapter kind: one ConfigError with the key path, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from effectgate.adapters import ConfigError, build_adapter, resolved_secrets

ENV = "EG_TEST_SETTINGS_SECRET"
VALID: dict[str, dict[str, Any]] = {
    "stripe": {"kind": "stripe", "api_base": "http://127.0.0.1:9", "api_key_env": ENV},
    "postmark": {"kind": "postmark", "base_url": "http://127.0.0.1:9", "server_token_env": ENV},
    "smtp": {"kind": "smtp", "host": "127.0.0.1", "password_env": ENV},
    "http": {"kind": "http", "request": {"url": "http://127.0.0.1:9/a"}, "token_env": ENV},
}
SECRET_KEY = {"stripe": "api_key", "postmark": "server_token", "smtp": "password", "http": "token"}


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "s3cret-settings-value")


@pytest.mark.parametrize("kind", sorted(VALID))
async def test_a_valid_table_builds_and_registers_its_secret(kind: str) -> None:
    adapter = build_adapter(kind, VALID[kind])
    await adapter.close()
    assert "s3cret-settings-value" in resolved_secrets()


@pytest.mark.parametrize("kind", sorted(VALID))
def test_a_misspelt_key_is_named_with_a_suggestion(kind: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_adapter(kind, VALID[kind] | {"timout": 5})
    assert str(err.value) == f"adapters.{kind}.timout: unknown key (did you mean timeout?)"
    assert (err.value.table, err.value.key) == (f"adapters.{kind}", "timout")


@pytest.mark.parametrize("kind", sorted(VALID))
def test_a_non_numeric_timeout_is_a_config_error(kind: str) -> None:
    with pytest.raises(ConfigError, match=rf"^adapters\.{kind}\.timeout: input should be a valid number.*'abc'"):
        build_adapter(kind, VALID[kind] | {"timeout": "abc"})
    with pytest.raises(ConfigError, match=rf"^adapters\.{kind}\.timeout: input should be greater than 0"):
        build_adapter(kind, VALID[kind] | {"timeout": 0})


@pytest.mark.parametrize("kind", sorted(VALID))
def test_a_named_secret_must_exist(kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key = SECRET_KEY[kind]
    monkeypatch.delenv(ENV)
    with pytest.raises(ConfigError, match=rf"^adapters\.{kind}\.{key}_env: environment variable {ENV} is not set"):
        build_adapter(kind, VALID[kind])
    table = {k: v for k, v in VALID[kind].items() if k != f"{key}_env"}
    with pytest.raises(ConfigError, match=rf"^adapters\.{kind}\.{key}_file: cannot read"):
        build_adapter(kind, table | {f"{key}_file": str(tmp_path / "nope")})
    monkeypatch.setenv(ENV, "x")
    with pytest.raises(ConfigError, match="not both"):
        build_adapter(kind, VALID[kind] | {f"{key}_file": str(tmp_path / "nope")})


def test_required_secrets_and_keys() -> None:
    with pytest.raises(ConfigError, match=r"^adapters\.stripe\.api_key: set api_key_env or api_key_file$"):
        build_adapter("stripe", {"api_base": "http://127.0.0.1:9"})
    with pytest.raises(ConfigError, match=r"^adapters\.mail\.host: is required$"):
        build_adapter("mail", {"kind": "smtp"})
    with pytest.raises(ConfigError, match=r"^adapters\.stripe\.api_base: must be an http\(s\) URL"):
        build_adapter("stripe", VALID["stripe"] | {"api_base": "ftp://x"})
