"""`EFFECTGATE_CONFIG` stands for `--config` wherever the option is taken (the `make run` banner
and the tutorial export it): through the real CLI, each command in a child process with the
variable set and no `--config`."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from effectgate_lab.chaos.config_writer import write_config


def gateway_config(folder: Path) -> Path:
    doc = {
        "server": {"listen": "127.0.0.1:0"},
        "store": {"url": f"sqlite:///{folder}/effectgate.db"},
        "adapters": {"crm": {"kind": "http", "base_url": "http://127.0.0.1:9", "request": {"url": "/invoices"}}},
        "tools": {"record_invoice": {"adapter": "crm"}},
    }
    return write_config(doc, folder / "effectgate.toml")


async def effectgate(*args: str, config: Path | str | None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_")}
    if config is not None:
        env["EFFECTGATE_CONFIG"] = str(config)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", *args,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(child.communicate(), 120)
    assert child.returncode is not None
    return child.returncode, out.decode()


async def test_every_command_that_reads_the_config_takes_it_from_the_variable(tmp_path: Path) -> None:
    config = gateway_config(tmp_path)
    code, out = await effectgate("migrate", config=config)
    assert code == 0, out
    commands = [("check",), ("audit", "verify"), ("notify", "pending"), ("notify", "failed")]
    done = await asyncio.gather(*(effectgate(*c, config=config) for c in commands))
    for command, (code, out) in zip(commands, done, strict=True):
        assert code == 0, f"effectgate {' '.join(command)}: {out}"
        assert "--config" not in out, out


async def test_serve_and_mcp_read_the_file_the_variable_names(tmp_path: Path) -> None:
    # A file that is not there: each command names the path it was given by the variable.
    missing = tmp_path / "nowhere.toml"
    for command in (("serve",), ("mcp",)):
        code, out = await effectgate(*command, config=missing)
        assert code != 0 and str(missing) in out, f"effectgate {' '.join(command)}: {out}"
        assert "required: --config" not in out, out


async def test_an_explicit_config_wins_and_none_at_all_is_refused(tmp_path: Path) -> None:
    config = gateway_config(tmp_path)
    code, out = await effectgate("check", "--config", str(config), config=tmp_path / "nowhere.toml")
    assert code == 0, out
    for command in (("check",), ("audit", "verify"), ("serve",)):
        code, out = await effectgate(*command, config=None)
        assert code == 2 and "--config" in out, f"effectgate {' '.join(command)}: {out}"


@pytest.mark.parametrize("command", [("check",), ("serve",), ("audit", "verify")])
async def test_the_help_names_the_variable(command: tuple[str, ...]) -> None:
    code, out = await effectgate(*command, "--help", config=None)
    assert code == 0 and "EFFECTGATE_CONFIG" in out, out
