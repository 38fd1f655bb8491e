"""The metrics port: `/metrics` (Prometheus text), `/livez` and `/readyz` for HTTP probes; any
other path is 404, so a probe pointed at a wrong path fails instead of passing.

`/livez` is 200 while the process answers; `/readyz` is 200 only when the gateway would take work
(the same readiness the gRPC health service reports: store writable, reconciler alive, clock within
bound) and 503 with the reason otherwise, also while the gateway waits for its store at start-up.
The server runs in a thread of its own: a scrape never waits on the event loop, and `/livez`
answers even when the loop is stalled long enough for the gRPC side to look dead.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from effectgate.gateway.config import PROMETHEUS_LISTEN, host_port
from effectgate.gateway.runtime.listener import probe_bind, refusal

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# (ready, why): why not when not ready; when ready, "" or a warning that keeps it ready.
ReadyProbe = Callable[[], tuple[bool, str]]


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6  # http.server's is IPv4 only


def not_started() -> tuple[bool, str]:
    return False, "starting"


def local_metrics() -> bytes:
    """This process's registry (the OpenTelemetry Prometheus reader registers into it)."""
    try:
        from prometheus_client import REGISTRY, generate_latest
    except ImportError:  # no metrics SDK: the probes still work
        return b""
    return bytes(generate_latest(REGISTRY))


class ProbeServer:
    """`ProbeServer(host, port)`; `ready` and `metrics` may be replaced while it runs."""

    def __init__(self, host: str, port: int, *, metrics: Callable[[], bytes] = local_metrics) -> None:
        self.metrics = metrics
        self.ready: ReadyProbe = not_started
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.partition("?")[0]
                if path == "/metrics":
                    self._answer(200, owner.metrics(), CONTENT_TYPE)
                elif path == "/livez":
                    self._answer(200, b"ok\n")
                elif path == "/readyz":
                    ready, why = owner.ready()
                    text = ("ok" + (f" ({why})" if why else "")) if ready else f"not ready: {why}"
                    self._answer(200 if ready else 503, f"{text}\n".encode())
                else:
                    self._answer(404, b"not found: /metrics, /livez, /readyz\n")

            def _answer(self, status: int, body: bytes, kind: str = "text/plain; charset=utf-8") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # one line per scrape would drown the log

        where = host_port(host, port)
        probe_bind(where, PROMETHEUS_LISTEN)  # the line `check` says too (commands/listen_check.py)
        try:
            self._server = (_Server6 if ":" in host else ThreadingHTTPServer)((host, port), Handler)
        except OSError as exc:  # taken since the probe
            raise refusal(where, exc, PROMETHEUS_LISTEN) from None
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="probes", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# -- one endpoint for a `serve --workers N` pool -------------------------------------------------


def fetch(port: int, path: str, timeout: float = 3.0) -> tuple[int, bytes]:
    """GET http://127.0.0.1:`port``path`: (status, body); (0, reason) when it does not answer."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as answer:
            return int(answer.status), bytes(answer.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())
    except OSError as exc:
        return 0, str(exc).encode()


def merge_metrics(texts: list[bytes]) -> bytes:
    """The workers' Prometheus texts as one, every sample labelled `worker="i"` (its index).

    Summing would be wrong for gauges (each worker reads the whole store's UNKNOWN backlog) and
    would hide a worker that stopped counting; `sum without (worker) (…)` gives the pool's total."""
    from prometheus_client.metrics_core import Metric
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.samples import Sample

    families: dict[str, Metric] = {}
    for index, text in enumerate(texts):
        for family in text_string_to_metric_families(text.decode("utf-8", errors="replace")):
            merged = families.setdefault(
                family.name, Metric(family.name, family.documentation, family.type, family.unit)
            )
            for sample in family.samples:
                labels = {**sample.labels, "worker": str(index)}
                merged.samples.append(Sample(sample.name, labels, sample.value, sample.timestamp, sample.exemplar))
    return _exposition(list(families.values()))


def _exposition(families: list[object]) -> bytes:
    from prometheus_client import CollectorRegistry, generate_latest

    class Fixed:
        def collect(self) -> list[object]:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    return bytes(generate_latest(registry))
