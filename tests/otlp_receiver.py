"""A real OTLP/HTTP receiver for tests (protobuf bodies decoded with opentelemetry-proto), and
`effectgate serve` in a child process configured by environment variables.

`python -m tests.otlp_receiver` (from the repository's root) runs the receiver alone for tests in
other languages: it prints `otlp receiver on <endpoint>` and serves what arrived as JSON at
`GET /spans`.

The receiver keeps every span, metric data point and log record it is sent; tests wait on conditions over
them with generous bounds (the exporters batch and send in the background).
"""

from __future__ import annotations

import asyncio
import gzip
import os
import re
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from effectgate_lab.chaos.config_writer import write_config
from tests.gateway_forks import popen_gateway

T = TypeVar("T")


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def attrs(items: Sequence[KeyValue]) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in items}


@dataclass
class OtlpReceiver:
    """POST /v1/traces, /v1/metrics and /v1/logs on 127.0.0.1:<free port>."""

    trace_requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    metric_requests: list[ExportMetricsServiceRequest] = field(default_factory=list)
    log_requests: list[ExportLogsServiceRequest] = field(default_factory=list)
    endpoint: str = ""
    _runner: web.AppRunner | None = None

    async def start(self) -> str:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/metrics", self._metrics)
        app.router.add_post("/v1/logs", self._logs)
        app.router.add_get("/spans", self._spans_json)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.endpoint = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.endpoint

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @staticmethod
    async def _body(request: web.Request) -> bytes:
        body = await request.read()
        return gzip.decompress(body) if request.headers.get("Content-Encoding") == "gzip" else body

    async def _traces(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await self._body(request))
        self.trace_requests.append(message)
        reply = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")

    async def _metrics(self, request: web.Request) -> web.Response:
        message = ExportMetricsServiceRequest()
        message.ParseFromString(await self._body(request))
        self.metric_requests.append(message)
        reply = ExportMetricsServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")

    async def _logs(self, request: web.Request) -> web.Response:
        message = ExportLogsServiceRequest()
        message.ParseFromString(await self._body(request))
        self.log_requests.append(message)
        reply = ExportLogsServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")

    async def _spans_json(self, _request: web.Request) -> web.Response:
        return web.json_response([span_json(service, span) for service, span in self.spans_by_service()])

    # -- what arrived ----------------------------------------------------------------------------

    @property
    def spans(self) -> list[Span]:
        return [
            span
            for req in self.trace_requests
            for resource in req.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def spans_by_service(self) -> list[tuple[str, Span]]:
        """(the resource's `service.name`, span) for every span received."""
        return [
            (str(attrs(resource.resource.attributes).get("service.name", "")), span)
            for req in self.trace_requests
            for resource in req.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def logs_by_resource(self) -> list[tuple[dict[str, Any], str, LogRecord]]:
        """(the resource's attributes, the scope's name, record) for every log record received."""
        return [
            (attrs(resource.resource.attributes), scope.scope.name, record)
            for req in self.log_requests
            for resource in req.resource_logs
            for scope in resource.scope_logs
            for record in scope.log_records
        ]

    def resources(self) -> list[dict[str, Any]]:
        return [attrs(rs.resource.attributes) for req in self.trace_requests for rs in req.resource_spans]

    def named(self, name: str) -> list[Span]:
        return [span for span in self.spans if span.name == name]

    def dump(self) -> str:
        """Everything received, as text, for "this marker appears nowhere" checks."""
        return "\n".join(MessageToJson(m) for m in [*self.trace_requests, *self.metric_requests, *self.log_requests])


def span_json(service: str, span: Span) -> dict[str, Any]:
    return {
        "service": service,
        "name": span.name,
        "kind": Span.SpanKind.Name(span.kind),
        "traceId": span.trace_id.hex(),
        "spanId": span.span_id.hex(),
        "parentSpanId": span.parent_span_id.hex(),
    }


async def wait_for(probe: Callable[[], T | None], what: str, timeout: float = 60.0, every: float = 0.1) -> T:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        found = probe()
        if found:
            return found
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(every)


class ChildGateway:
    """`effectgate serve` as a child process with the given environment and log options."""

    def __init__(
        self,
        config: Mapping[str, Any],
        workdir: Path,
        env: Mapping[str, str],
        *,
        log_level: str = "INFO",
        log_format: str = "json",
        name: str = "gateway",
        options_last: bool = False,
    ) -> None:
        """`options_last`: the log options after `serve` (`effectgate serve --config X --log-format json`)."""
        path = write_config(config, workdir / f"{name}.toml")
        options = ("--log-level", log_level, "--log-format", log_format)
        command = ("serve", "--config", str(path))
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EFFECTGATE_CRASH_AT"))}
        child_env.update(env)
        child_env["PYTHONUNBUFFERED"] = "1"
        argv = [*command, *options] if options_last else [*options, *command]
        self.proc = popen_gateway(argv, child_env)  # a fork of the test's driver (tests/gateway_forks.py)
        self.output: list[str] = []
        self.port = 0
        self.metrics = 0
        self._reader: asyncio.Future[None] | None = None

    async def ready(self, timeout: float = 30.0) -> str:
        loop = asyncio.get_running_loop()
        self._reader = loop.run_in_executor(None, self._read)
        await wait_for(lambda: self.port or self.proc.poll() is not None, "the gateway to start", timeout)
        if not self.port:
            raise RuntimeError("gateway did not start:\n" + "".join(self.output))
        return f"127.0.0.1:{self.port}"

    async def metrics_port(self, timeout: float = 30.0) -> int:
        """The metrics port it bound (`prometheus_listen = "127.0.0.1:0"`), from the line after
        its ready line (call `ready()` first)."""
        ended = self._reader
        await wait_for(lambda: self.metrics or (ended is not None and ended.done()), "the metrics line", timeout)
        if not self.metrics:
            raise RuntimeError("gateway announced no metrics port:\n" + "".join(self.output))
        return self.metrics

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            found = re.search(r"serving on port (\d+)", line)
            if found:
                self.port = int(found.group(1))
            found = re.search(r"metrics on port (\d+)", line)
            if found:
                self.metrics = int(found.group(1))

    async def terminate(self) -> int:
        """SIGTERM: a graceful stop, which flushes the exporters."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        code = await loop.run_in_executor(None, self.proc.wait, 30)
        if self._reader is not None:
            await self._reader
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


async def _serve_forever() -> None:
    receiver = OtlpReceiver()
    print(f"otlp receiver on {await receiver.start()}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve_forever())
