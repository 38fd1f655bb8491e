"""`EFFECTGATE_CONFIG` stands for `--config` wherever the option is taken (the `make run` banner
and the tutorial export it): through the real CLI, each command in a child process with the
variable set and no `--config`. The first (`migrate`) is a `python -m effectgate.gateway` process
of its own; the others are forks of one process that loaded the command line once
(tests/cli_forks.py)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from effectgate_lab.chaos.config_writer import write_config
from tests.cli_forks import CliForks


def gateway_config(folder: Path) -> Path:
    doc = {
        "server": {"listen": "127.0.0.1:0"},
        "store": {"url": f"sqlite:///{folder}/effectgate.db"},
        "adapters": {"crm": {"kind": "http", "base_url": "http://127.0.0.1:9", "request": {"url": "/invoices"}}},
        "tools": {"record_invoice": {"adapter": "crm"}},
    }
    return write_config(doc, folder / "effectgate.toml")


def environment(config: Path | str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_")}
    if config is not None:
        env["EFFECTGATE_CONFIG"] = str(config)
    return env


async def forked(forks: CliForks, *args: str, config: Path | str | None) -> tuple[int, str]:
    """As effectgate(), in a fork (tests/cli_forks.py); stderr, then stdout."""
    done = await asyncio.to_thread(forks.run, *args, env=environment(config))
    return done.returncode, done.stderr + done.stdout


async def effectgate(*args: str, config: Path | str | None) -> tuple[int, str]:
    env = environment(config)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", *args,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(child.communicate(), 120)
    assert child.returncode is not None
    return child.returncode, out.decode()


async def test_every_command_that_reads_the_config_takes_it_from_the_variable(tmp_path: Path, forks: CliForks) -> None:
    config = gateway_config(tmp_path)
    code, out = await effectgate("migrate", config=config)
    assert code == 0, out
    commands = [("check",), ("audit", "verify"), ("notify", "pending"), ("notify", "failed")]
    done = [await forked(forks, *c, config=config) for c in commands]
    for command, (code, out) in zip(commands, done, strict=True):
        assert code == 0, f"effectgate {' '.join(command)}: {out}"
        assert "--config" not in out, out


async def test_serve_and_mcp_read_the_file_the_variable_names(tmp_path: Path, forks: CliForks) -> None:
    # A file that is not there: each command names the path it was given by the variable.
    missing = tmp_path / "nowhere.toml"
    for command in (("serve",), ("mcp",)):
        code, out = await forked(forks, *command, config=missing)
        assert code != 0 and str(missing) in out, f"effectgate {' '.join(command)}: {out}"
        assert "required: --config" not in out, out


async def test_an_explicit_config_wins_and_none_at_all_is_refused(tmp_path: Path, forks: CliForks) -> None:
    config = gateway_config(tmp_path)
    code, out = await forked(forks, "check", "--config", str(config), config=tmp_path / "nowhere.toml")
    assert code == 0, out
    for command in (("check",), ("audit", "verify"), ("serve",)):
        code, out = await forked(forks, *command, config=None)
        assert code == 2 and "--config" in out, f"effectgate {' '.join(command)}: {out}"


@pytest.mark.parametrize("command", [("check",), ("serve",), ("audit", "verify")])
async def test_the_help_names_the_variable(command: tuple[str, ...], forks: CliForks) -> None:
    code, out = await forked(forks, *command, "--help", config=None)
    assert code == 0 and "EFFECTGATE_CONFIG" in out, out
