"""Test gateways (`python -m effectgate.gateway serve ...`) started as forks of a process that
already imported everything a gateway imports except gRPC.

A gateway's start is its imports: about 0.6 s of CPU on this machine (pydantic, the Stripe SDK
with aiohttp, httpx and requests, OpenTelemetry, protobuf, the gateway's own modules), and the
suite starts a few hundred. Here one driver per pytest worker (tests/gateway_fork_driver.py) imports
those once, then forks once per gateway: the fork becomes the command (its argv, environment,
working directory, stdin on /dev/null, stdout and stderr on the pipes the test made) and runs
`effectgate.gateway` as `python -m` does, through normal interpreter exit (atexit hooks, flushes).
It imports what is left (gRPC, the server's modules: about 50 ms of CPU) itself.

Why gRPC is the line: gRPC's own guidance is that a process forks before it loads the gRPC
library, never after (its C core's threads and polling state do not survive a fork). The driver
checks at start that no `grpc` module is loaded and that it runs one thread, and refuses to serve
otherwise.

What a fork shares with the driver and a real process would not, so those starts stay real
processes (`eligible`):
- what the interpreter reads at its start (`PYTHON*`, locale variables) and what the preloaded
  modules read when imported (`EFFECTGATE_CRASH_AT`/`EFFECTGATE_PAUSE_AT` in core/failpoints.py,
  the CA bundle variables aiohttp's SSL contexts read, OpenTelemetry's context choice): a request
  whose value differs from the driver's is not forked;
- the hash seed: every fork has the driver's (a real process draws its own).
The fork's parent is the driver, not the test: the driver reaps it (`os.wait4`) and reports its
exit status and CPU time, which `ForkedChild` exposes as subprocess.Popen does (`poll`, `wait`,
`returncode`, signals) and tests/cpu_meter.py adds to the test that started it.

`EFFECTGATE_TEST_REAL_GATEWAYS=1` makes every start a real process again. Doors whose claim is the
process itself (the `effectgate` script, a wheel's install, crash failpoints) start real processes.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO

# Read when the interpreter starts or when a preloaded module is imported: a fork has the driver's.
READ_AT_START = re.compile(
    r"^(PYTHON(?!UNBUFFERED$)\w*|LANG|LANGUAGE|LC_\w+|TZ|SSL_CERT_FILE|SSL_CERT_DIR|REQUESTS_CA_BUNDLE"
    r"|OTEL_PYTHON_\w+|OTEL_SEMCONV_STABILITY_OPT_IN|AIOHTTP_\w+|EFFECTGATE_CRASH_AT|EFFECTGATE_PAUSE_AT|LD_\w+|MALLOC_\w+)$"
)
REAL_GATEWAYS = "EFFECTGATE_TEST_REAL_GATEWAYS"
MESSAGE = 1 << 20  # the largest message either side sends (a request holds an environment)
DRIVER = Path(__file__).with_name("gateway_fork_driver.py")


def eligible(env: Mapping[str, str]) -> bool:
    """Whether a gateway with this environment may be a fork (see the module's docstring)."""
    if os.environ.get(REAL_GATEWAYS) == "1" or env.get(REAL_GATEWAYS) == "1":
        return False
    driver = _driver_env()
    keys = {k for k in (*env, *driver) if READ_AT_START.match(k)}
    return env.get("PYTHONUNBUFFERED") == "1" and all(env.get(k) == driver.get(k) for k in keys)


@functools.cache
def _driver_env() -> dict[str, str]:
    """The environment the driver starts with (this process's when the first gateway starts)."""
    return {k: v for k, v in {**os.environ, "PYTHONUNBUFFERED": "1"}.items() if k != REAL_GATEWAYS}


class ForkedChild:
    """What the tests use of subprocess.Popen, for a gateway the driver forked."""

    def __init__(self, pid: int, args: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(args)
        self.stdout: IO[str] | None = None
        self.stderr: IO[str] | None = None
        self.exited: Future[int] = Future()  # its exit status, set by the reader thread

    @property
    def returncode(self) -> int | None:
        return self.exited.result() if self.exited.done() else None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        try:
            return self.exited.result(timeout)
        except TimeoutError:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0) from None

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # exited; its report is on the way
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class GatewayForks:
    """This process's driver: `spawn` forks a command, `reaped_cpu` is its reaped forks' CPU."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        with theirs:
            self._proc = subprocess.Popen(
                [sys.executable, str(DRIVER), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=_driver_env(),
            )
        ready = json.loads(self._sock.recv(MESSAGE) or b'{"error": "the driver exited"}')
        if "error" in ready:
            self._proc.wait(30)
            raise RuntimeError(f"the gateway fork driver refused to start: {ready['error']}")
        self.reaped_cpu = 0.0
        self._next = 0
        self._lock = threading.Lock()
        self._started: dict[int, Future[int]] = {}  # request id -> the fork's pid
        self._children: dict[int, ForkedChild] = {}
        self._early: dict[int, tuple[int, float]] = {}
        self._reader = threading.Thread(target=self._read, name="gateway-forks", daemon=True)
        self._reader.start()

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], stdout: int, stderr: int) -> ForkedChild:
        """`python -m effectgate.gateway *argv` as a fork; `stdout`, `stderr`: fds it writes to
        (this process keeps its own copies; close them after)."""
        with self._lock:
            self._next += 1
            ident = self._next
            started: Future[int] = Future()
            self._started[ident] = started
        request = {"id": ident, "argv": list(argv), "env": dict(env), "cwd": os.getcwd()}
        socket.send_fds(self._sock, [json.dumps(request).encode()], [stdout, stderr])
        pid = started.result(60)  # RuntimeError when the driver exited first
        child = ForkedChild(pid, [sys.executable, "-m", "effectgate.gateway", *argv])
        with self._lock:
            self._children[pid] = child
            early = self._early.pop(pid, None)
        if early is not None:
            self._exited(child, *early)
        return child

    def _exited(self, child: ForkedChild, returncode: int, cpu: float) -> None:
        self.reaped_cpu += cpu
        child.exited.set_result(returncode)

    def _read(self) -> None:
        while data := self._sock.recv(MESSAGE):
            message = json.loads(data)
            if "id" in message:
                with self._lock:
                    started = self._started.pop(message["id"])
                started.set_result(message["pid"])
                continue
            with self._lock:
                child = self._children.pop(message["exited"], None)
                if child is None:  # exited before spawn() filed it
                    self._early[message["exited"]] = (message["returncode"], message["cpu"])
            if child is not None:
                self._exited(child, message["returncode"], message["cpu"])
        with self._lock:  # the driver is gone: nothing will report these again
            waiting = list(self._started.values())
            orphans = list(self._children.values())
            self._children.clear()
        for started in waiting:
            started.set_exception(RuntimeError("the gateway fork driver exited before the gateway started"))
        for child in orphans:
            child.exited.set_result(-signal.SIGKILL)

    def close(self) -> None:
        """Ends the driver, which kills the forks still running."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        try:
            self._proc.wait(30)
        finally:
            self._sock.close()


_FORKS: list[GatewayForks] = []
_FORKS_LOCK = threading.Lock()


def gateway_forks() -> GatewayForks:
    """This process's driver, started at the first call (ended when this process exits)."""
    with _FORKS_LOCK:
        if not _FORKS:
            _FORKS.append(GatewayForks())
            atexit.register(_FORKS[0].close)
        return _FORKS[0]


def reaped_cpu() -> float:
    """CPU seconds of the forks that have exited so far (0 before any)."""
    return _FORKS[0].reaped_cpu if _FORKS else 0.0


def popen_gateway(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[str] | ForkedChild:
    """`python -m effectgate.gateway *argv`, stdout and stderr one text pipe (`.stdout`), as
    `subprocess.Popen(..., stdout=PIPE, stderr=STDOUT, text=True)`: a fork when `eligible`."""
    if not eligible(env):
        command = [sys.executable, "-m", "effectgate.gateway", *argv]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(env), text=True)
    read, write = os.pipe()
    try:
        child = gateway_forks().spawn(argv, env, write, write)
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    child.stdout = open(read)  # noqa: SIM115 (the child's pipe, read until it exits, as Popen's)
    return child


class AsyncForkedChild:
    """What the tests use of asyncio.subprocess.Process, for a gateway the driver forked."""

    def __init__(self, child: ForkedChild, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader) -> None:
        self._child = child
        self.stdout = stdout
        self.stderr = stderr

    @property
    def pid(self) -> int:
        return self._child.pid

    @property
    def returncode(self) -> int | None:
        return self._child.returncode

    async def wait(self) -> int:
        return await asyncio.wrap_future(self._child.exited)

    def send_signal(self, sig: int) -> None:
        self._child.send_signal(sig)

    def terminate(self) -> None:
        self._child.terminate()

    def kill(self) -> None:
        self._child.kill()


async def spawn_gateway(argv: Sequence[str], env: Mapping[str, str]) -> AsyncForkedChild:
    """`python -m effectgate.gateway *argv` as a fork, its stdout and stderr two StreamReaders
    (as asyncio.create_subprocess_exec with two PIPEs); only when `eligible(env)`."""
    loop = asyncio.get_running_loop()
    readers: list[asyncio.StreamReader] = []
    writes: list[int] = []
    try:
        for _ in range(2):
            read, write = os.pipe()
            writes.append(write)
            reader = asyncio.StreamReader(limit=2**16, loop=loop)
            pipe = os.fdopen(read, "rb", buffering=0)  # the transport owns it
            await loop.connect_read_pipe(lambda reader=reader: asyncio.StreamReaderProtocol(reader), pipe)  # type: ignore[misc]
            readers.append(reader)
        child = gateway_forks().spawn(argv, env, writes[0], writes[1])
    finally:
        for write in writes:
            os.close(write)
    return AsyncForkedChild(child, readers[0], readers[1])
