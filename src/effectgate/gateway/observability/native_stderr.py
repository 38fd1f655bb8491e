"""Under `--log-format json`, every line on stderr is JSON, whoever writes it.

gRPC's C core logs through absl straight to file descriptor 2 (`E1201 15:25:29.889855 26863
ssl_transport_security.cc:2563] Handshake failed …`), below Python's logging. The gateway sets
`GRPC_VERBOSITY=ERROR` unless the environment says otherwise (INFO lines such as every failed TLS
handshake are dropped); what still comes — and any other native or stray text — goes through a
pipe here: a thread reads it line by line, passes JSON lines through and wraps the others in a
JSON line (`scope.name` "grpc" for absl's format, with its severity; "stderr" otherwise).
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading
import time

from effectgate.gateway.observability.log_lines import json_line, redact

# absl: severity letter, MMDD, time, thread, file:line] message
_ABSL = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ ([^\]]+)\] ?(.*)$")
_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}
_installed: list[tuple[int, int, threading.Thread]] = []


def as_json(line: str) -> str:
    """`line` as a JSON log line (unchanged when it already is one)."""
    if line.startswith("{"):
        return line
    from effectgate.adapters.secrets import resolved_secrets

    found = _ABSL.match(line)
    if found:
        letter, where, message = found.groups()
        body = redact(message, resolved_secrets())
        return json_line(body, _LEVELS[letter], "grpc", time.time(), {"code.location": where})
    return json_line(redact(line, resolved_secrets()), "WARNING", "stderr", time.time())


def _pump(read_fd: int, out_fd: int) -> None:
    with os.fdopen(read_fd, "r", encoding="utf-8", errors="replace", closefd=True) as pipe:
        for raw in pipe:
            line = raw.rstrip("\n")
            if line.strip():
                os.write(out_fd, (as_json(line) + "\n").encode())


def capture_stderr() -> None:
    """Routes file descriptor 2 through the JSON wrapper (once per process)."""
    if _installed:
        return
    sys.stderr.flush()
    original = os.dup(2)
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    pump = threading.Thread(target=_pump, args=(read_fd, original), name="stderr-json", daemon=True)
    pump.start()
    _installed.append((original, read_fd, pump))
    atexit.register(release_stderr)


def release_stderr() -> None:
    """Puts the original stderr back and lets the pump write what is left (at exit)."""
    if not _installed:
        return
    original, _, pump = _installed.pop()
    sys.stderr.flush()
    os.dup2(original, 2)  # closes the pipe's last write end: the pump reads to the end and stops
    pump.join(timeout=2.0)
