"""A local OTLP/HTTP receiver for the traced benchmark: decodes every export like a collector
would, counts spans and metric points, and answers 200.

    python -m effectgate_lab.bench.otlp_sink      # prints `otlp sink on http://127.0.0.1:PORT`
"""

from __future__ import annotations

import asyncio
import gzip
import signal

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"


class Sink:
    def __init__(self) -> None:
        self.spans = 0
        self.points = 0

    @staticmethod
    async def _body(request: web.Request) -> bytes:
        body = await request.read()
        return gzip.decompress(body) if request.headers.get("Content-Encoding") == "gzip" else body

    async def traces(self, request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest.FromString(await self._body(request))
        self.spans += sum(len(s.spans) for r in export.resource_spans for s in r.scope_spans)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(), content_type=PROTOBUF)

    async def metrics(self, request: web.Request) -> web.Response:
        export = ExportMetricsServiceRequest.FromString(await self._body(request))
        self.points += sum(
            len(m.ListFields()) for r in export.resource_metrics for s in r.scope_metrics for m in s.metrics
        )
        return web.Response(body=ExportMetricsServiceResponse().SerializeToString(), content_type=PROTOBUF)

    async def stats(self, _: web.Request) -> web.Response:
        return web.json_response({"spans": self.spans, "metric_points": self.points})


async def serve() -> None:
    sink = Sink()
    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/traces", sink.traces)
    app.router.add_post("/v1/metrics", sink.metrics)
    app.router.add_get("/stats", sink.stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"otlp sink on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(serve())
