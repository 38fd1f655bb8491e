"""`[server] listen = "unix:PATH"` tried from outside: whatever lies at PATH or at PATH.lock
that is not a gateway's stays as it was (one line, exit 2); a missing or unwritable directory is
named; the socket admits only the gateway's user and group whatever the umask (a caller on it
counts as local: no TLS for tokens, no tokens at all in development mode); a process answering on
a socket file without a gateway's lock keeps it; a graceful stop leaves neither socket nor lock.
Every gateway that serves is a real `effectgate serve`; the refused starts run `effectgate serve`
as forks of one process that loaded the command line once (tests/cli_forks.py), but for the one
without write access to the directory, a real process (the wiring); every wait is for a line or
an exit."""

from __future__ import annotations

import asyncio
import ctypes
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.cli_forks import CliForks
from tests.harness import config_doc, stripe_tools
from tests.serve_child import ServeChild
from tests.test_unix_listen import charge, serving_on, socket_doc

NOBODY = 65534
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


async def refused(tmp_path: Path, sim: StripeSimulator, address: str, **popen: Any) -> list[str]:
    """A real gateway process on `address` that must not start: exit 2 and its one `effectgate:` line."""
    child = ServeChild.for_config(socket_doc(tmp_path, sim, address), tmp_path / "eg.toml", popen=popen)
    assert await (await child.start()).exit_code() == 2, child.transcript()
    assert not any("Traceback" in line for line in child.stderr), child.transcript()
    return [line for line in child.stderr if line.startswith("effectgate:")]


async def refused_fork(forks: CliForks, tmp_path: Path, sim: StripeSimulator, address: str) -> list[str]:
    """As `refused`, the gateway a fork (tests/cli_forks.py); the simulator keeps serving meanwhile."""
    config = write_config(socket_doc(tmp_path, sim, address), tmp_path / "eg.toml")
    done = await asyncio.to_thread(forks.run, "serve", "--config", str(config))
    transcript = done.stdout + done.stderr
    assert done.returncode == 2, transcript
    assert "Traceback" not in done.stderr, transcript
    return [line for line in done.stderr.splitlines() if line.startswith("effectgate:")]


def snapshot(path: Path) -> tuple[Any, ...]:
    """What lies at `path`, to the byte: its inode and mode, and its content or target."""
    found = os.lstat(path)
    if stat.S_ISLNK(found.st_mode):
        content: Any = (os.readlink(path), snapshot(path.resolve()) if path.exists() else None)
    elif stat.S_ISDIR(found.st_mode):
        content = sorted((child.name, snapshot(child)) for child in path.iterdir())
    else:
        content = path.read_bytes() if stat.S_ISREG(found.st_mode) else None
    return found.st_ino, found.st_mode, found.st_mtime_ns, content


def there(*paths: Path | str) -> list[str]:
    """Which of `paths` have something at them (a link counts, even dangling)."""
    return [str(path) for path in paths if os.path.lexists(path)]


def a_regular_file(path: Path) -> None:
    path.write_text("the user's notes\n")


def a_directory(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_text("kept\n")


def a_symbolic_link(path: Path) -> None:
    (path.parent / "elsewhere").write_text("the user's file\n")
    path.symlink_to(path.parent / "elsewhere")


def a_dangling_link(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere")


def a_named_pipe(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (a_regular_file, "a regular file"),
        (a_directory, "a directory"),
        (a_symbolic_link, "a symbolic link"),
        (a_dangling_link, "a symbolic link"),
        (a_named_pipe, "a named pipe"),
    ],
)
async def test_what_lies_at_the_path_stays_as_it_was(
    tmp_path: Path, sim: StripeSimulator, make: Callable[[Path], None], kind: str, forks: CliForks
) -> None:
    path = tmp_path / "grpc.sock"
    make(path)
    before = snapshot(path)
    address = f"unix:{path}"
    said = await refused_fork(forks, tmp_path, sim, address)
    assert said == [f"effectgate: cannot listen on {address}: {path} is {kind}, not a socket; left as it is"]
    assert snapshot(path) == before
    assert there(f"{path}.lock") == []  # nothing of the gateway's is left beside it


def a_foreign_lock(lock: Path) -> str:
    lock.write_text("12345\n")
    return f"{lock} is not a gateway's lock (that is an empty file); left as it is"


def a_linked_lock(lock: Path) -> str:
    (lock.parent / "precious").write_text("")  # empty: a lock if it were opened through the link
    lock.symlink_to(lock.parent / "precious")
    return f"cannot open its lock {lock} (a symbolic link)"


def someone_elses_lock(lock: Path) -> str:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    lock.touch()
    os.chown(lock, NOBODY, NOBODY)
    return f"{lock} belongs to uid {NOBODY}, not to this user (uid 0); left as it is"


@pytest.mark.parametrize("make", [a_foreign_lock, a_linked_lock, someone_elses_lock])
async def test_a_lock_file_that_is_not_a_gateways_stays_as_it_was(
    tmp_path: Path, sim: StripeSimulator, make: Callable[[Path], str], forks: CliForks
) -> None:
    path = tmp_path / "grpc.sock"
    lock = tmp_path / "grpc.sock.lock"
    why = make(lock)
    before = snapshot(lock)
    address = f"unix:{path}"
    assert await refused_fork(forks, tmp_path, sim, address) == [f"effectgate: cannot listen on {address}: {why}"]
    assert snapshot(lock) == before
    assert there(path) == []


@pytest.mark.parametrize("parent", ["missing", "a_file"])
async def test_a_directory_that_is_not_there_is_named(
    tmp_path: Path, sim: StripeSimulator, parent: str, forks: CliForks
) -> None:
    directory = tmp_path / parent
    if parent == "a_file":
        directory.write_text("not a directory\n")
    address = f"unix:{directory}/grpc.sock"
    said = await refused_fork(forks, tmp_path, sim, address)
    why = f"the directory {directory} does not exist" if parent == "missing" else f"{directory} is not a directory"
    assert said == [f"effectgate: cannot listen on {address}: {why}"]


# Looked up here, not in the child between fork and exec (a lock another thread held at the
# fork, dlopen's, would never be released there).
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _as_root_without_dac_override() -> None:
    """In the child between fork and exec: uid 0 then meets the file modes like anyone else."""
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if _prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            os._exit(97)


def _unwritable_without_dac_override(directory: Path) -> bool:
    probe = "import os, sys; sys.exit(os.access(sys.argv[1], os.W_OK | os.X_OK))"
    command = [sys.executable, "-I", "-S", "-c", probe, str(directory)]
    return subprocess.run(command, preexec_fn=_as_root_without_dac_override, check=False).returncode == 0


async def test_a_directory_this_user_cannot_write_is_named(tmp_path: Path, sim: StripeSimulator) -> None:
    directory = tmp_path / "sockets"
    directory.mkdir()
    popen: dict[str, Any] = {}
    directory.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: the gateway runs without that power instead
        os.chown(directory, NOBODY, NOBODY)
        popen["preexec_fn"] = _as_root_without_dac_override
        if not _unwritable_without_dac_override(directory):
            pytest.skip("this root cannot give up CAP_DAC_OVERRIDE for a child")
    address = f"unix:{directory}/grpc.sock"
    said = await refused(tmp_path, sim, address, **popen)
    why = f"the directory {directory} is not writable by this user (uid {os.geteuid()})"
    assert said == [f"effectgate: cannot listen on {address}: {why}"]
    assert list(directory.iterdir()) == []


async def test_a_socket_someone_answers_on_is_not_taken(tmp_path: Path, sim: StripeSimulator, forks: CliForks) -> None:
    path = tmp_path / "grpc.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as theirs:
        theirs.bind(str(path))
        theirs.listen(8)
        before = snapshot(path)
        address = f"unix:{path}"
        said = await refused_fork(forks, tmp_path, sim, address)
        assert said == [
            f"effectgate: cannot listen on {address}: the address is in use (a process answers on {path}, "
            "without a gateway's lock)"
        ]
        assert snapshot(path) == before and there(f"{path}.lock") == []
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as caller:
            caller.connect(str(path))  # still theirs, still listening (else: connection refused)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory any user may enter (tmp_path's ancestors are root's alone): there, only the
    socket file's own mode decides who may connect."""
    directory = Path(tempfile.mkdtemp(prefix="eg-sock-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


CONNECT_AS = """
import os, socket, sys
path, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.setgroups([]); os.setgid(gid); os.setuid(uid)
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(path)
except PermissionError:
    sys.exit(13)
"""


def connects_as(path: Path, uid: int, gid: int) -> bool:
    """A process of `uid`:`gid` (no other groups) connects to the socket `path`."""
    done = subprocess.run([sys.executable, "-I", "-S", "-c", CONNECT_AS, str(path), str(uid), str(gid)], check=False)
    assert done.returncode in (0, 13), done
    return done.returncode == 0


async def test_the_socket_admits_only_the_gateways_user_and_group(
    tmp_path: Path, shared_dir: Path, sim: StripeSimulator
) -> None:
    path = shared_dir / "grpc.sock"
    address = f"unix:{path}"
    # umask 0: every file the gateway makes could be anyone's; its socket still is not.
    child = ServeChild.for_config(socket_doc(tmp_path, sim, address), tmp_path / "eg.toml", popen={"umask": 0})
    await child.start()
    try:
        await serving_on(child, address)
        made = os.lstat(path)
        assert stat.S_ISSOCK(made.st_mode)
        assert stat.S_IMODE(made.st_mode) == 0o660
        assert (made.st_uid, made.st_gid) == (os.geteuid(), os.getegid())
        assert (await charge(address, "run-door-1")).startswith("pi_")
        if os.geteuid() == 0:  # another user: refused outside the group, admitted in it
            assert not connects_as(path, NOBODY, NOBODY)
            assert connects_as(path, NOBODY, made.st_gid)
    finally:
        assert await child.stop() == 0, child.transcript()


async def test_a_graceful_stop_leaves_neither_socket_nor_lock(tmp_path: Path, sim: StripeSimulator) -> None:
    path = tmp_path / "grpc.sock"
    address = f"unix:{path}"
    for turn in (1, 2):  # the second gateway starts on a clean directory
        child = await ServeChild.for_config(socket_doc(tmp_path, sim, address), tmp_path / f"eg{turn}.toml").start()
        try:
            await serving_on(child, address)
            assert there(path, f"{path}.lock") == [str(path), f"{path}.lock"]
            assert (await charge(address, f"run-stop-{turn}")).startswith("pi_")
        finally:
            assert await child.stop() == 0, child.transcript()
        assert there(path, f"{path}.lock") == []


async def test_a_gateway_stopped_while_waiting_for_its_store_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "grpc.sock"
    address = f"unix:{path}"
    unreachable = "postgresql://effectgate:secret@127.0.0.1:9/effectgate"
    doc = config_doc(unreachable, listen=address, **stripe_tools("http://127.0.0.1:9"))
    child = await ServeChild.for_config(doc, tmp_path / "eg.toml").start()
    try:  # the waiting room holds the address (health NOT_SERVING) once it says it waits
        await child.until(lambda: any("the store cannot be reached" in line for line in child.stderr), "the wait")
        assert there(path, f"{path}.lock") == [str(path), f"{path}.lock"]
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o660
    finally:
        assert await child.stop() == 0, child.transcript()
    assert "effectgate: stopped while waiting for the store; nothing was served" in child.stderr
    assert there(path, f"{path}.lock") == []
