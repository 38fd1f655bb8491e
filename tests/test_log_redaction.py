"""No secret in any log line: the filter the gateway installs at start-up redacts every secret
the adapters resolved, bearer-looking tokens, provider API keys and passwords in URLs, in the
records of every library (provider SDKs log at INFO what a provider echoes)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from effectgate.adapters.secrets import read_secret
from effectgate.gateway.observability.log_lines import mask_url
from effectgate.gateway.observability.logging_setup import NOISY_LOGGERS, RedactingFilter, setup_logging

SECRET = "provider-secret-7f3a9c2e"


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    monkeypatch.setenv("EFFECTGATE_TEST_REDACTION_KEY", SECRET)
    assert read_secret({"token_env": "EFFECTGATE_TEST_REDACTION_KEY"}, "token") == SECRET
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    yield out
    root.removeHandler(handler)


def test_every_configured_secret_and_token_is_redacted(captured: io.StringIO) -> None:
    logging.getLogger("stripe").warning("provider said: invalid key %s", SECRET)
    logging.getLogger("httpx").warning(
        "HTTP Request: POST https://x/charge headers=%r", {"Authorization": "Bearer abcdefgh12345678"}
    )
    logging.getLogger("effectgate.server").warning("store postgresql://eg:hunter2secret@db/eg is down")
    logging.getLogger("other").warning("key sk_live_TESTONLY0000000000000000 leaked")
    try:
        raise RuntimeError(f"boom with {SECRET}")
    except RuntimeError:
        logging.getLogger("effectgate.rpc").exception("unexpected")
    text = captured.getvalue()
    for leaked in (SECRET, "abcdefgh12345678", "hunter2secret", "TESTONLY0000000000000000"):
        assert leaked not in text, text
    assert "invalid key ***" in text and "postgresql://eg:***@db/eg" in text and "RuntimeError" in text


def test_provider_sdks_log_at_warning(captured: io.StringIO) -> None:
    before = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    setup_logging("INFO")
    for name in NOISY_LOGGERS:
        assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING
    logging.getLogger("httpx").info("HTTP Request: GET https://api.example.com/customers/cus_secret_payload")
    assert "cus_secret_payload" not in captured.getvalue()
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


def test_mask_url() -> None:
    assert mask_url("postgresql://u:p%40ss@h:5432/db?x=1") == "postgresql://u:***@h:5432/db?x=1"
    assert mask_url("sqlite:///var/eg.db") == "sqlite:///var/eg.db"
    assert mask_url("postgresql://u@h/db") == "postgresql://u@h/db"
