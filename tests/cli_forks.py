"""`effectgate` commands run as forks of one process that loaded the command line once.

A real `python -m effectgate.gateway check ...` spends most of its CPU (0.6-1 s on the CI
machine) importing the gateway; a test module that provokes twenty start-up failures pays that
twenty times for the same imports. Here one driver process (this file, run as a script) imports
the command line and the modules `check` loads, then forks once per command: each fork is a
process of its own, with the command's argv, environment, working directory and stdin
(/dev/null), that runs the `effectgate` entry point (effectgate.gateway.runtime.entry, what
`python -m effectgate.gateway` runs) and exits with its status; its stdout and stderr are what it
wrote. What a fork does not repeat is the interpreter's start and the imports, which every command
shares: each module that uses these keeps at least one test on a real `python -m effectgate.gateway`
process (the wiring), and the cases here check what each command says and returns.

Not for commands that start servers (gRPC must not be forked into a listening gateway; keep those
real processes), nor for cases that set the variables modules read when imported
(core/failpoints.py's EFFECTGATE_CRASH_AT / EFFECTGATE_PAUSE_AT): the driver refuses them.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

READ_AT_IMPORT = ("EFFECTGATE_CRASH_AT", "EFFECTGATE_PAUSE_AT")
# What `check` (and a refused `serve`) loads, so that a fork does not load it again.
# (Adapter kinds are found through entry points, never through what is imported: a module
# loaded here makes no kind available that a real process would not find.)
PRELOAD = (
    "effectgate.gateway.runtime.cli",
    "effectgate.gateway.runtime.commands.check",
    "effectgate.gateway.runtime.commands.notify",
    "effectgate.gateway.runtime.serve",
    "effectgate.gateway.store.sqlite",
    "effectgate.adapters.stripe.adapter",
    "stripe._stripe_client",
)


class CliForks:
    """A driver process; `run(*argv, env=, cwd=)` answers like `subprocess.run(capture_output=True,
    text=True)` on `python -m effectgate.gateway *argv`. One command at a time (a lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folder = Path(tempfile.mkdtemp(prefix="effectgate-forks-"))
        self._proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._count = 0
        self._unread = b""

    def _answer(self, timeout: float | None) -> dict[str, int] | None:
        """The driver's next line, or None when `timeout` passes first (read from the pipe's fd:
        a buffered reader could hold a line that select() no longer sees)."""
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        end = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._unread:
            left = None if end is None else max(0.0, end - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            assert chunk, f"the fork driver died (exit {self._proc.wait(10)})"
            self._unread += chunk
        line, self._unread = self._unread.split(b"\n", 1)
        answer: dict[str, int] = json.loads(line)
        return answer

    def run(
        self,
        *argv: str,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        timeout: float = 90,
    ) -> subprocess.CompletedProcess[str]:
        """`env` as subprocess.run takes it (the whole environment; default: this process's). A
        command still running after `timeout` seconds is killed: subprocess.TimeoutExpired."""
        environment = dict(os.environ if env is None else env)
        assert not set(READ_AT_IMPORT) & set(environment), "read at import: use a real process"
        with self._lock:
            self._count += 1
            out, err = self._folder / f"{self._count}.out", self._folder / f"{self._count}.err"
            request = {
                "argv": list(argv),
                "env": environment,
                "cwd": str(cwd or os.getcwd()),
                "out": str(out),
                "err": str(err),
            }
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(json.dumps(request).encode() + b"\n")
                self._proc.stdin.flush()
                started = self._answer(None)
                assert started is not None
                finished = self._answer(timeout)
                if finished is None:
                    os.kill(started["pid"], signal.SIGKILL)  # the fork the driver just named
                    self._answer(None)
                stdout, stderr = out.read_text(), err.read_text()
            finally:  # also when the driver died under the command (its files stay otherwise)
                out.unlink(missing_ok=True)
                err.unlink(missing_ok=True)
            command = [sys.executable, "-m", "effectgate.gateway", *argv]
            if finished is None:
                raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
            return subprocess.CompletedProcess(command, finished["returncode"], stdout, stderr)

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(30)
        finally:
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait(10)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            shutil.rmtree(self._folder, ignore_errors=True)


def _exit_status(stopped: SystemExit) -> int:
    """What the interpreter makes of `sys.exit(x)` at the top level."""
    if stopped.code is None:
        return 0
    if isinstance(stopped.code, int):
        return stopped.code
    print(stopped.code, file=sys.stderr)
    return 1


def _command(request: dict[str, object]) -> None:
    """In the fork: become the command, run it, exit with its status."""
    status = 1
    try:
        os.chdir(str(request["cwd"]))
        os.environ.clear()
        os.environ.update(dict(request["env"]))  # type: ignore[call-overload]
        for fd, path, flags in (
            (0, os.devnull, os.O_RDONLY),
            (1, str(request["out"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            (2, str(request["err"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        ):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        sys.argv = ["effectgate", *request["argv"]]  # type: ignore[misc]
        from effectgate.gateway.runtime.entry import main

        try:
            status = main()
        except SystemExit as stopped:
            status = _exit_status(stopped)
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)


def _serve_requests() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _command(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    del sys.path[0]  # this folder: run as a script, its modules must not shadow anything
    _serve_requests()
