"""OTLP over gRPC, and the PostgreSQL store's asyncpg spans inside the Execute trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, config_doc, stripe_tools
from tests.otlp_receiver import ChildGateway, attrs, wait_for
from tests.test_execute import request
from tests.test_telemetry import client_traceparent, execute
from tests.test_telemetry_secrets import PAYLOAD_MARKER, marked


class GrpcTraceReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    """OTLP/gRPC TraceService on 127.0.0.1:<free port>."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.server = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self.server)  # type: ignore[no-untyped-call]
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    async def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
        self.requests.append(request)
        return ExportTraceServiceResponse()

    @property
    def spans(self) -> list[Span]:
        return [s for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]


@pytest.mark.postgres
async def test_otlp_grpc_export_with_the_postgres_store(tmp_path: Path, pg_dsn: str) -> None:
    receiver, sim = GrpcTraceReceiver(), StripeSimulator(api_key=API_KEY)
    await receiver.server.start()
    await sim.start()
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    gateway = ChildGateway(config_doc(pg_dsn, **stripe_tools(sim.base_url)), tmp_path, env)
    try:
        traceparent, trace_id, _ = client_traceparent()
        answer = await execute(await gateway.ready(), request(payload=marked()), traceparent)
        assert answer.action.state == pb.EFFECT_STATE_CONFIRMED

        def trace_with_db() -> list[Span] | None:
            spans = [s for s in receiver.spans if s.trace_id.hex() == trace_id]
            names = {s.name for s in spans}
            db = [s for s in spans if attrs(s.attributes).get("db.system") == "postgresql"]
            return spans if db and {"effectgate.execute", "effectgate.provider.execute"} <= names else None

        spans = await wait_for(trace_with_db, "the Execute trace with its database spans")
        execute_span = next(s for s in spans if s.name == "effectgate.execute")
        db = [s for s in spans if attrs(s.attributes).get("db.system") == "postgresql"]
        # The store's writes happen inside the Execute (intent before dispatch, then the receipt).
        by_id = {s.span_id: s for s in spans}

        def under_execute(span: Span) -> bool:
            while span.parent_span_id in by_id:
                span = by_id[span.parent_span_id]
                if span.span_id == execute_span.span_id:
                    return True
            return False

        assert len(db) >= 2 and all(under_execute(s) for s in db)
        statements = " ".join(str(attrs(s.attributes).get("db.statement", "")) for s in db)
        assert "$1" in statements  # placeholders, never values
        assert PAYLOAD_MARKER not in str(receiver.requests) and answer.action.action_id not in statements
    finally:
        await gateway.terminate()
        await sim.stop()
        await receiver.server.stop(None)
