"""The race around a Unix socket's lock, forced: gateway A stops (removes PATH.lock while it holds
it, then lets it go) just after gateway B opened the old PATH.lock and just before B flocks it.
B's flock then succeeds on a file no longer at PATH.lock: unless B sees that and locks the file
that is there now, a third gateway makes a new PATH.lock, locks it too, and two gateways "hold"
one address. A unit test of listener.py's lock-taking function: the other gateways are open file
descriptions of this process (flock locks conflict between those as between processes), and A's
stop runs at the exact point between B's open and B's flock (a wrapper of `open_lock`), so
nothing depends on timing."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from effectgate.gateway.runtime import listener


def take(lock: str) -> int:
    """Another gateway's lock: PATH.lock opened (made if missing) and flocked."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def stop(lock: str, fd: int) -> None:
    """What a gateway's release does to its lock: removed while still locked, then let go."""
    os.unlink(lock)
    os.close(fd)


def between_open_and_flock(monkeypatch: pytest.MonkeyPatch, then: Callable[[], None]) -> list[int]:
    """Runs `then` once, right after B's first open of PATH.lock; the inodes B opened, in order."""
    opened: list[int] = []
    real = listener.open_lock

    def open_lock(address: str, lock: str, create: bool = True) -> int | None:
        fd = real(address, lock, create)
        assert fd is not None
        opened.append(os.fstat(fd).st_ino)
        if len(opened) == 1:
            then()
        return fd

    monkeypatch.setattr(listener, "open_lock", open_lock)
    return opened


def test_a_lock_removed_under_the_opener_is_not_the_one_it_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "grpc.sock")
    lock, address = f"{path}.lock", f"unix:{path}"
    a = take(lock)
    opened = between_open_and_flock(monkeypatch, lambda: stop(lock, a))
    listener._claim_unix(address, path)  # B
    try:
        # A third gateway finds B's lock at PATH.lock and is refused.
        c = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(c, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(c)
        held = os.fstat(listener._unix_locks[path].lock)
        assert (held.st_dev, held.st_ino) == (os.lstat(lock).st_dev, os.lstat(lock).st_ino)
        assert len(opened) == 2, opened  # the old file (closed: its number may come again), then the new one
    finally:
        listener.release(address)
    assert not os.path.lexists(lock)


def test_a_gateway_that_locked_the_new_file_first_keeps_the_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "grpc.sock")
    lock, address = f"{path}.lock", f"unix:{path}"
    a = take(lock)
    d: list[int] = []

    def a_stops_and_d_starts() -> None:
        stop(lock, a)
        d.append(take(lock))  # gateway D: a new PATH.lock, locked before B's flock

    between_open_and_flock(monkeypatch, a_stops_and_d_starts)
    try:
        with pytest.raises(listener.ListenError, match=r"the address is in use \(another gateway serves there\)"):
            listener._claim_unix(address, path)  # B
        assert path not in listener._unix_locks
        assert os.fstat(d[0]).st_ino == os.lstat(lock).st_ino  # D's lock, untouched
    finally:
        listener.release(address)
        for fd in d:
            os.close(fd)
