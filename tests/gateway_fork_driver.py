"""The driver of tests/gateway_forks.py, run as a script by each pytest worker (one each).

It imports what a gateway imports that loads no gRPC (`PRELOAD`), checks that no gRPC module is
loaded and that it runs one thread, says so on its socket, then forks one child per request. A
child takes the request's stdout and stderr (fds passed with the request), /dev/null as stdin, its
working directory, environment and argv, and runs `effectgate.gateway` as `python -m` does,
through the interpreter's normal exit. The driver reaps each child and reports its exit status
and CPU time; when the worker's end of the socket closes, it kills the children left and exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import sys
import threading
from typing import Any

MESSAGE = 1 << 20  # as tests/gateway_forks.py (not imported: this runs as a script)
# What a gateway imports that loads no gRPC (checked: the driver refuses to serve if gRPC loaded).
PRELOAD = (
    # the gateway's own (each adapter kind, both stores, config, core, observability)
    "effectgate.gateway.runtime.entry",
    "effectgate.gateway.runtime.process",
    "effectgate.gateway.config",
    "effectgate.gateway.core",
    "effectgate.gateway.model",
    "effectgate.gateway.store.sqlite",
    "effectgate.gateway.store.postgres",
    "effectgate.gateway.observability",
    "effectgate.adapters.registry",
    "effectgate.adapters.stripe.adapter",
    "effectgate.adapters.square.adapter",
    "effectgate.adapters.postmark.adapter",
    "effectgate.adapters.smtp.adapter",
    "effectgate.adapters.http.adapter",
    "effectgate.adapters.mcp.adapter",
    "effectgate.cel",
    # what they load later (a first charge, MCP sessions, metrics, the console's web server)
    "stripe._stripe_client",
    "stripe._payment_intent",
    "mcp.client.session",
    "mcp.client.streamable_http",
    "opentelemetry.sdk.metrics",
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter.prometheus",
    "httpcore",
    "jsonschema",
    "uvicorn",
    "starlette.applications",
    "sse_starlette",
    "uvloop",
)


def _preload(sock: socket.socket) -> None:
    import gc
    import importlib

    from effectgate.gateway.runtime.process import collector_paused

    with collector_paused():  # as a gateway loads its modules
        for name in PRELOAD:
            importlib.import_module(name)
    loaded = sorted(m for m in sys.modules if m == "grpc" or m.startswith(("grpc.", "grpc_")))
    threads = threading.active_count()
    if loaded or threads != 1:
        sock.send(json.dumps({"error": f"gRPC modules loaded: {loaded}; threads: {threads}"}).encode())
        raise SystemExit(1)
    gc.freeze()  # what the forks share stays shared (the collector does not touch its pages)
    sock.send(json.dumps({"ready": os.getpid()}).encode())


def _serve(sock: socket.socket) -> dict[str, Any] | None:
    """Forks one child per request; in a child, returns its request (else None: the worker left)."""
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, None)
    children: dict[int, int] = {}  # pid -> pidfd
    while True:
        for key, _ in selector.select():
            if key.data is None:
                data, fds, _, _ = socket.recv_fds(sock, MESSAGE, 2)
                if not data:  # the test process is gone: so are its gateways
                    for pid in children:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    return None
                request: dict[str, Any] = json.loads(data)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    for pidfd in children.values():
                        os.close(pidfd)
                    sock.close()
                    _become(request, fds)
                    return request
                for fd in fds:
                    os.close(fd)
                children[pid] = os.pidfd_open(pid)
                selector.register(children[pid], selectors.EVENT_READ, pid)
                sock.send(json.dumps({"id": request["id"], "pid": pid}).encode())
            else:
                pid = key.data
                _, status, usage = os.wait4(pid, 0)
                selector.unregister(key.fileobj)
                os.close(children.pop(pid))
                returncode = os.waitstatus_to_exitcode(status)
                cpu = usage.ru_utime + usage.ru_stime
                sock.send(json.dumps({"exited": pid, "returncode": returncode, "cpu": cpu}).encode())


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In the fork: the command's stdio, working directory, environment and argv."""
    import tempfile

    stdin = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((stdin, 0), (fds[0], 1), (fds[1], 2)):
        os.dup2(fd, target)
    for fd in {stdin, *fds}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read from TMPDIR again when first asked
    sys.path[0] = os.getcwd()  # what `python -m` puts first
    sys.argv = ["-m", *request["argv"]]


def _main() -> None:
    sys.path[0] = os.getcwd()  # as `python -m` would have it, not this file's folder
    sock = socket.socket(fileno=int(sys.argv[1]))
    _preload(sock)
    if _serve(sock) is None:
        return
    import runpy

    runpy.run_module("effectgate.gateway", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main()
