"""`effectgate check`'s look at `[server] listen`: would `serve` get the address now? Nothing is
bound for good and no file is made or changed.

What `serve` would refuse for good (a missing or unwritable directory, a file that is not a
socket at PATH, a PATH.lock that is not a gateway's) is a ListenError with serve's own words:
these functions are listener.py's. An address held now (a gateway serves there, another process
answers on the socket, the port is bound) is a WARNING line: it may be free by the time `serve`
starts (a deploy runs `check` while the old gateway still serves).
"""

from __future__ import annotations

import fcntl
import os

from effectgate.gateway.config import unix_path
from effectgate.gateway.runtime.listener import (
    AddressInUse,
    check_directory,
    in_use_by_gateway,
    in_use_by_process,
    occupant,
    open_lock,
    probe_bind,
)


def _gateway_holds(address: str, lock: int | None) -> None:
    """An AddressInUse if a gateway holds PATH.lock (`lock`, opened by the caller).

    Asked only when a process answers on the socket: a shared lock taken for this instant could
    then only refuse a gateway that would be refused anyway; on a free address it could refuse
    one that starts at that very moment."""
    if lock is None:
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise in_use_by_gateway(address) from None
    fcntl.flock(lock, fcntl.LOCK_UN)


def _unix_readiness(address: str, path: str) -> str:
    check_directory(address, path)
    lock = open_lock(address, f"{path}.lock", create=False)  # a lock serve would refuse raises here
    try:
        found = occupant(address, path)  # anything but a socket raises here
        if found == "a live socket":
            _gateway_holds(address, lock)
            raise in_use_by_process(address, path)  # no gateway's lock: someone else answers there
    finally:
        if lock is not None:
            os.close(lock)
    if found == "a stale socket":
        return f"{path} is a socket nobody answers on (left by a gateway that stopped): serve takes it over"
    return f"nothing at {path} yet: serve makes the socket there (mode 0660)"


# How the line of an address held now begins (check logs it as a warning too).
WARNING = "listen: WARNING: "


def listen_readiness(address: str) -> str:
    """The `listen:` line of `check`; a ListenError (exit 2) for what `serve` would refuse for good."""
    path = unix_path(address)
    try:
        if path:
            return f"listen: {address}: OK: {_unix_readiness(address, path)}"
        if address.rpartition(":")[2] == "0":
            return f"listen: {address}: OK: port 0: serve takes any free port"
        probe_bind(address)  # bound and closed at once
        return f"listen: {address}: OK: the port can be bound now"
    except AddressInUse as exc:
        return f"{WARNING}{exc}; serve exits with this line while it is held"
