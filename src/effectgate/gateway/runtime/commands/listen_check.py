"""`effectgate check`'s look at each address `serve` would bind (`[server] listen`, the metrics
port, the webhook listener): would `serve` get it now? Nothing is bound for good and no file is
made or changed. One line each, named `listen:`, `metrics:` and `webhooks:`.

What `serve` would refuse for good (a missing or unwritable directory, a file that is not a
socket at PATH, a PATH.lock that is not a gateway's) is a ListenError with serve's own words:
these functions are listener.py's. An address held now (a gateway serves there, another process
answers on the socket, the port is bound) is a WARNING line: it may be free by the time `serve`
starts (a deploy runs `check` while the old gateway still serves).
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass

from effectgate.gateway.config import PROMETHEUS_LISTEN, WEBHOOKS_LISTEN, Config, host_port, unix_path
from effectgate.gateway.observability import telemetry_sdk
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


@dataclass(frozen=True)
class Readiness:
    """One address's line; `warning` (logged as a warning too) when it is held now."""

    line: str
    warning: str = ""


def _port(name: str, address: str, setting: str = "") -> str:
    """A HOST:PORT's verdict (serve's probe_bind: the same line, with `setting` named)."""
    probe_bind(address, setting)  # bound and closed at once (port 0: a free one, the host is named)
    if address.rpartition(":")[2] == "0":
        return f"{name}: {address}: OK: port 0: serve takes any free port"
    return f"{name}: {address}: OK: the port can be bound now"


def _readiness(name: str, address: str, setting: str = "") -> Readiness:
    path = unix_path(address)
    try:
        if path:
            return Readiness(f"{name}: {address}: OK: {_unix_readiness(address, path)}")
        return Readiness(_port(name, address, setting))
    except AddressInUse as exc:
        return Readiness(f"{name}: WARNING: {exc}; serve exits with this line while it is held", str(exc))


def listen_readiness(config: Config) -> list[Readiness]:
    """The lines of `check` about the addresses `serve` binds: `[server] listen`, then the metrics
    port and the webhook listener when configured; a ListenError (exit 2) for what `serve` would
    refuse for good."""
    found = [_readiness("listen", config.listen)]
    metrics = telemetry_sdk.prometheus_address(config.telemetry)  # the environment's too, as serve's
    if metrics is not None:
        found.append(_readiness("metrics", host_port(*metrics), PROMETHEUS_LISTEN))
    if config.webhooks is not None:
        found.append(_readiness("webhooks", config.webhooks.listen, WEBHOOKS_LISTEN))
    return found
