"""One duration grammar: the config's durations and the operator CLI's flags read the same
text as the same number of seconds, and refuse the same text."""

from __future__ import annotations

import argparse

import pytest

from effectgate.adapters.base import ConfigError
from effectgate.client.cli.args import duration as cli_duration
from effectgate.gateway.config import parse_config, parse_duration

READ = {
    "90": 90.0,
    "2.5": 2.5,
    "500ms": 0.5,
    "2s": 2.0,
    "5m": 300.0,
    "1h": 3600.0,
    "30d": 30 * 86400.0,
    "1h30m": 5400.0,
    "2m30s": 150.0,
    "1d12h": 129600.0,
    "1m500ms": 60.5,
    "1.5h": 5400.0,
    " 10S ": 10.0,
}
REFUSED = ["soon", "", "h", "1x", "1h30", "-5s", "-1", "1h-30m", "s1", "1 h 30 m x"]


@pytest.mark.parametrize("text", list(READ))
def test_both_read_the_same_seconds(text: str) -> None:
    assert parse_duration(text) == READ[text]
    assert cli_duration(text) == READ[text]


@pytest.mark.parametrize("text", REFUSED)
def test_both_refuse_the_same_text(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_duration(text)
    with pytest.raises(argparse.ArgumentTypeError):
        cli_duration(text)


def test_a_combined_duration_in_the_config(tmp_path: object) -> None:
    config = parse_config(
        {
            "store": {"url": "sqlite:///:memory:"},
            "adapters": {"stripe": {"api_key_env": "X"}},
            "tools": {"charge_card": {"adapter": "stripe", "retention": "1d12h", "approval_ttl": "1h30m"}},
        }
    )
    tool = config.tools["charge_card"]
    assert tool.retention == 129600.0 and tool.approval_ttl == 5400.0
