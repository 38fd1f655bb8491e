"""A store URL's password never reaches a log line, an error text or a traceback."""

from __future__ import annotations

import logging
import subprocess
import sys
import traceback
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from effectgate.gateway.store import StoreUnavailable, open_store, redact_url
from effectgate_lab.chaos.config_writer import write_config
from tests.harness import config_doc, start_gateway, stripe_tools
from tests.ports import closed_port

PASSWORD = "Pa55-w0rd-never-shown"


def with_password(dsn: str) -> str:
    parts = urlsplit(dsn)
    user_host = parts.netloc.rpartition("@")
    netloc = f"{user_host[0] or 'postgres'}:{PASSWORD}@{user_host[2]}"
    return urlunsplit(parts._replace(netloc=netloc))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"postgresql://eg:{PASSWORD}@db:5432/eg?sslmode=require", "postgresql://eg:***@db:5432/eg?sslmode=require"),
        (f"postgres://eg:{PASSWORD}@db/eg", "postgres://eg:***@db/eg"),
        (f"postgresql://eg@db/eg?password={PASSWORD}&pool_max=4", "postgresql://eg@db/eg?password=***&pool_max=4"),
        ("postgresql://eg@db/eg", "postgresql://eg@db/eg"),
        ("sqlite:///var/lib/eg.db?synchronous=NORMAL", "sqlite:///var/lib/eg.db?synchronous=NORMAL"),
        (f"postgresql://eg:{PASSWORD}@[::1/eg", "<unparsable store URL, 45 characters>"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


async def test_unreachable_postgres_error_has_no_password(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with closed_port() as nothing:  # held: nobody else listens there meanwhile
        url = f"postgresql://eg:{PASSWORD}@127.0.0.1:{nothing}/eg?password={PASSWORD}"
        store = open_store(url)
        assert PASSWORD not in store.describe() and PASSWORD not in repr(store)
        with pytest.raises(StoreUnavailable) as caught:
            await store.open()
        await store.close()
    text = "".join(traceback.format_exception(caught.value))  # the whole chain of causes
    assert "StoreUnavailable" in text and PASSWORD not in text
    assert PASSWORD not in caplog.text


async def test_start_up_log_masks_the_password(pg_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # The test server trusts local logins, so any password connects.
    live = await start_gateway(config_doc(with_password(pg_dsn), **stripe_tools("http://127.0.0.1:9")))
    await live.close()
    assert "listening" in caplog.text and ":***@" in caplog.text
    assert PASSWORD not in caplog.text


def test_serve_with_unreachable_postgres_prints_no_password(tmp_path: Path) -> None:
    with closed_port() as nothing:  # held: nobody else listens there meanwhile
        url = f"postgresql://eg:{PASSWORD}@127.0.0.1:{nothing}/eg?connect_timeout=2"
        config = write_config(config_doc(url, **stripe_tools("http://127.0.0.1:9")), tmp_path / "effectgate.toml")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "effectgate.gateway",
                "--log-level",
                "DEBUG",
                "serve",
                "--config",
                str(config),
                "--fail-fast",  # serve waits for an unreachable store by default
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "PostgreSQL" in output
    assert PASSWORD not in output
