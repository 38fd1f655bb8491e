"""`effectgate serve` in a child process that the harness can kill -9 and restart on one port."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from effectgate.gateway.config import parse_config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def write_config(doc: Mapping[str, Any], path: Path) -> Path:
    """Writes a config doc: top-level tables, and one sub-table per adapter and per tool."""
    parse_config(doc)  # fail here, not in the child
    lines: list[str] = []
    for section, table in doc.items():
        if section in ("adapters", "tools"):
            for name, sub in table.items():
                lines.append(f"[{section}.{json.dumps(name)}]")
                lines.extend(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in sub.items())
        else:
            lines.append(f"[{section}]")
            lines.extend(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in table.items())
    path.write_text("\n".join(lines) + "\n")
    return path


class ChildGateway:
    """One `effectgate serve` process; `kill()` is a real SIGKILL."""

    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path
        self.proc: subprocess.Popen[str] | None = None

    async def start(self, timeout: float = 30.0) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("EFFECTGATE_CRASH_AT", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "effectgate.gateway.cli", "--log-level", "ERROR", "serve"]
            + ["--config", str(self.config_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        stdout = self.proc.stdout
        assert stdout is not None
        loop = asyncio.get_running_loop()
        line = await asyncio.wait_for(loop.run_in_executor(None, stdout.readline), timeout)
        if not re.search(r"serving on port \d+", line):
            self.kill()
            raise RuntimeError(f"effectgate serve did not start: {line!r}")
        # Nothing more is read; the gateway logs to stderr (discarded) at ERROR level only.

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
