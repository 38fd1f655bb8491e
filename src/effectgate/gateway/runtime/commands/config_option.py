"""`--config PATH`, the same for every command that reads the gateway's TOML file: when
`EFFECTGATE_CONFIG` is set (the `make run` banner and the tutorial export it) it is the default,
and `--config` is required only without it."""

from __future__ import annotations

import argparse
import os
from typing import Any

CONFIG_ENV = "EFFECTGATE_CONFIG"


def config_from_env() -> str:
    return os.environ.get(CONFIG_ENV, "").strip()


def add_config_option(cmd: argparse.ArgumentParser, *, inherited: bool = False) -> None:
    """`--config` on `cmd`. `inherited`: a subcommand's copy of its parent's option (`audit verify
    --config` after `audit --config`), which must not overwrite a value given before it."""
    from_env = config_from_env()
    options: dict[str, Any] = {"help": f"path of the TOML config (default: ${CONFIG_ENV})"}
    if inherited:
        options["default"] = argparse.SUPPRESS
    elif from_env:
        options["default"] = from_env
    else:
        options["required"] = True
    cmd.add_argument("--config", **options)
