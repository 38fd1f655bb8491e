"""Where one `make run` keeps its things, and the ports it takes.

One folder per gateway port (`.effectgate/dev/<port>/`), held by a lock for as long as the run
lasts: a second `make run` on the same port stops before it touches anything, and one on another
port uses another folder. The simulators and the webhook listener have fixed ports derived from
the gateway's (+1000, +2000, …), so commands and bookmarks keep working across restarts, and
`state.json` in the folder tells `effectgate dev trigger` where everything is.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

DEFAULT_PORT = 50051
DEFAULT_ROOT = Path(".effectgate/dev")
STATE = "state.json"
# Offsets of the other servers' ports from the gateway's: distinct for neighbouring gateway ports.
OFFSETS = {"stripe": 1000, "postmark": 2000, "crm": 3000, "webhooks": 4000}


class DevError(Exception):
    """`make run` cannot start (or a trigger cannot run); the message is the one line to print."""


@dataclass(frozen=True)
class Ports:
    gateway: int
    stripe: int
    postmark: int
    crm: int
    webhooks: int

    @classmethod
    def around(cls, gateway: int) -> Ports:
        if not 0 < gateway <= 65535 - max(OFFSETS.values()):
            raise DevError(f"--port {gateway}: pick a port from 1 to {65535 - max(OFFSETS.values())}")
        return cls(gateway, **{name: gateway + offset for name, offset in OFFSETS.items()})

    def taken(self) -> list[str]:
        """The ports another program holds now ("name port" each)."""
        return [f"{name} {port}" for name, port in asdict(self).items() if not port_is_free(port)]


def port_is_free(port: int) -> bool:
    """Whether 127.0.0.1:`port` can be bound now."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def folder(root: Path, port: int) -> Path:
    return (root / str(port)).resolve()


@contextlib.contextmanager
def locked(workdir: Path) -> Iterator[IO[str]]:
    """Holds `workdir`'s lock for the block; DevError when another run holds it."""
    workdir.mkdir(parents=True, exist_ok=True)
    handle = (workdir / ".lock").open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise DevError(
                f"{workdir} is in use by a running `make run` (pid {holder}): its store is left as it is; "
                "stop that one first (Ctrl-C), or start another with --port"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield handle
    finally:
        handle.close()  # closing releases the lock


def fresh(workdir: Path) -> None:
    """Removes what the last run in this folder left (only the files `make run` writes)."""
    for name in ("effectgate.db", "effectgate.db-wal", "effectgate.db-shm", "effectgate.toml", "gateway.log", STATE):
        (workdir / name).unlink(missing_ok=True)


def write_state(workdir: Path, ports: Ports, **more: str) -> None:
    (workdir / STATE).write_text(json.dumps({"ports": asdict(ports), **more}, indent=2) + "\n")


def read_state(workdir: Path) -> dict[str, object]:
    try:
        state: dict[str, object] = json.loads((workdir / STATE).read_text())
    except FileNotFoundError:
        raise DevError(f"no `make run` is running here ({workdir / STATE} is missing): start one first") from None
    return state
