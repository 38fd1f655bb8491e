"""The gateway's own log records over OTLP, in the trace of the request they happened in: a real
`effectgate serve` child process and a real OTLP/HTTP receiver; and the export pipeline in
process, to show what it redacts and what it never exports."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from effectgate.adapters.secrets import read_secret
from effectgate.gateway.config.telemetry import TelemetryConfig
from effectgate.gateway.observability.log_export import logs_endpoint, start_log_export
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, API_KEY_ENV, WRONG_KEY_ENV, config_doc, stripe_tools_with_a_refused_key
from tests.otlp_receiver import ChildGateway, OtlpReceiver, attrs, wait_for
from tests.test_execute import request
from tests.test_telemetry import client_traceparent, execute, in_trace, otel_env
from tests.test_telemetry_grpc_pg import GrpcTraceReceiver

WRONG_KEY = "sk_test_wrongkey_logs_marker_4b7d19"
REFUSED = "provider refused the credentials of [adapters.stripe_wrong]"
SERVER_SPAN = "/effectgate.v1.EffectGateway/Execute"
SECRET = "provider-secret-logs-5e81c0"


def two_keys_config(tmp_path: Path, sim: StripeSimulator, **telemetry: Any) -> dict[str, Any]:
    """charge_card with the simulator's key, charge_wrong with a key it refuses (a WARNING)."""
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools_with_a_refused_key(sim.base_url, max_attempts=1))
    if telemetry:
        doc["telemetry"] = telemetry
    return doc


async def refused_execute(target: str, step: str) -> str:
    """An Execute with the refused key under a fresh client trace; its trace id."""
    traceparent, trace_id, _ = client_traceparent()
    wrong = request(step=step)
    wrong.tool = "charge_wrong"
    answer = await execute(target, wrong, traceparent)
    assert answer.action.state != pb.EFFECT_STATE_CONFIRMED
    return trace_id


async def test_a_warning_reaches_the_collector_in_its_requests_trace(tmp_path: Path) -> None:
    receiver, sim = OtlpReceiver(), StripeSimulator(api_key=API_KEY)
    await receiver.start()
    await sim.start()
    env = {
        **otel_env(receiver.endpoint, OTEL_LOGS_EXPORTER="otlp", OTEL_BLRP_SCHEDULE_DELAY="100"),
        API_KEY_ENV: API_KEY,
        WRONG_KEY_ENV: WRONG_KEY,
    }
    gateway = ChildGateway(two_keys_config(tmp_path, sim), tmp_path, env, log_level="WARNING")
    try:
        target = await gateway.ready()
        ok = await execute(target, request(step="ok"), client_traceparent()[0])
        assert ok.action.state == pb.EFFECT_STATE_CONFIRMED
        trace_id = await refused_execute(target, "wrong")

        def warning() -> tuple[dict[str, Any], str, LogRecord] | None:
            found = [
                item
                for item in receiver.logs_by_resource()
                if REFUSED in item[2].body.string_value and item[2].trace_id.hex() == trace_id
            ]
            return found[0] if found else None

        resource, scope, record = await wait_for(warning, "the credentials warning at the receiver")
        spans = await wait_for(
            lambda: (
                in_trace(receiver, trace_id)
                if any(s.name == SERVER_SPAN for s in in_trace(receiver, trace_id))
                else None
            ),
            "the Execute's server span",
        )
    finally:
        await gateway.terminate()
        await sim.stop()
        await receiver.stop()
    assert record.severity_text == "WARN" and record.severity_number == 13
    assert scope.startswith("effectgate.")
    # In the request's trace, under one of its spans, from the resource the traces carry.
    assert record.span_id.hex() in {s.span_id.hex() for s in spans}
    (span_resource,) = {tuple(sorted(r.items())) for r in receiver.resources()}
    assert resource["service.name"] == "effectgate-under-test" == dict(span_resource)["service.name"]
    assert resource["service.instance.id"] == dict(span_resource)["service.instance.id"] != ""
    # --log-level WARNING: nothing below it was exported (the gateway logs INFO lines at start).
    everything = receiver.logs_by_resource()
    assert everything and all(r.severity_number >= 13 for _, _, r in everything)
    exported = receiver.dump()
    for secret in (API_KEY, API_KEY[-8:], WRONG_KEY, WRONG_KEY[-8:]):
        assert secret not in exported


@pytest.mark.parametrize(
    ("env", "telemetry"),
    [({}, {}), ({"OTEL_LOGS_EXPORTER": "none"}, {"otlp_logs": True})],
    ids=["unset", "none-beats-config"],
)
async def test_no_logs_request_unless_asked(tmp_path: Path, env: dict[str, str], telemetry: dict[str, Any]) -> None:
    receiver, sim = OtlpReceiver(), StripeSimulator(api_key=API_KEY)
    await receiver.start()
    await sim.start()
    child_env = {**otel_env(receiver.endpoint, **env), API_KEY_ENV: API_KEY, WRONG_KEY_ENV: WRONG_KEY}
    gateway = ChildGateway(two_keys_config(tmp_path, sim, **telemetry), tmp_path, child_env)
    try:
        target = await gateway.ready()
        trace_id = await refused_execute(target, "wrong")
        await wait_for(lambda: REFUSED in "".join(gateway.output), "the warning on stderr")
        await wait_for(lambda: any(s.name == SERVER_SPAN for s in in_trace(receiver, trace_id)), "the server span")
    finally:
        # A graceful stop flushes every exporter: a logs pipeline would have sent by now.
        assert await gateway.terminate() == 0
        await sim.stop()
        await receiver.stop()
    assert receiver.log_requests == []


class GrpcLogsReceiver(logs_service_pb2_grpc.LogsServiceServicer):
    """OTLP/gRPC LogsService, added to a `GrpcTraceReceiver`'s server (one endpoint, both signals)."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self.requests: list[ExportLogsServiceRequest] = []
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(self, server)  # type: ignore[no-untyped-call]

    async def Export(self, request: ExportLogsServiceRequest, context: Any) -> ExportLogsServiceResponse:
        self.requests.append(request)
        return ExportLogsServiceResponse()

    @property
    def records(self) -> list[LogRecord]:
        return [lr for r in self.requests for rl in r.resource_logs for sl in rl.scope_logs for lr in sl.log_records]


async def test_logs_follow_the_traces_protocol_grpc(tmp_path: Path) -> None:
    traces, sim = GrpcTraceReceiver(), StripeSimulator(api_key=API_KEY)
    logs = GrpcLogsReceiver(traces.server)
    await traces.server.start()
    await sim.start()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{traces.port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "otlp",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_BLRP_SCHEDULE_DELAY": "100",
        API_KEY_ENV: API_KEY,
        WRONG_KEY_ENV: WRONG_KEY,
    }
    gateway = ChildGateway(two_keys_config(tmp_path, sim), tmp_path, env)
    try:
        trace_id = await refused_execute(await gateway.ready(), "wrong")
        found = await wait_for(
            lambda: [r for r in logs.records if REFUSED in r.body.string_value and r.trace_id.hex() == trace_id],
            "the credentials warning over gRPC",
        )
        await wait_for(
            lambda: any(s.name == SERVER_SPAN and s.trace_id.hex() == trace_id for s in traces.spans), "the server span"
        )
    finally:
        await gateway.terminate()
        await sim.stop()
        await traces.server.stop(None)
    assert found[0].severity_text == "WARN"
    assert WRONG_KEY not in str(logs.requests) and WRONG_KEY[-8:] not in str(logs.requests)


def test_the_environment_decides_then_the_section() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    configured = TelemetryConfig(otlp_endpoint="http://127.0.0.1:9", otlp_logs=True)
    assert logs_endpoint(TelemetryConfig(), endpoint) == (False, True)  # opt-in
    assert logs_endpoint(TelemetryConfig(), {**endpoint, "OTEL_LOGS_EXPORTER": "otlp"}) == (True, True)
    assert logs_endpoint(TelemetryConfig(), {"OTEL_LOGS_EXPORTER": "otlp"}) == (False, False)  # nowhere to send
    assert logs_endpoint(configured, {}) == (True, False)
    assert logs_endpoint(configured, {"OTEL_LOGS_EXPORTER": "none"}) == (False, False)
    logs_only = {"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://127.0.0.1:9/v1/logs", "OTEL_LOGS_EXPORTER": "otlp"}
    assert logs_endpoint(TelemetryConfig(), logs_only) == (True, True)


async def test_records_are_redacted_before_export_and_the_sdk_never_feeds_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EG_TEST_LOGS_SECRET", SECRET)
    assert read_secret({"token_env": "EG_TEST_LOGS_SECRET"}, "token") == SECRET
    receiver = OtlpReceiver()
    await receiver.start()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    config = TelemetryConfig(otlp_endpoint=receiver.endpoint, otlp_logs=True)  # -> <endpoint>/v1/logs
    export = start_log_export(config, {}, Resource.create({"service.name": "eg-in-process"}), from_env=False)
    root.setLevel(logging.WARNING)  # the handler keeps the level it was installed at
    log = logging.getLogger("effectgate.test_logs")
    tracer = TracerProvider().get_tracer("test")  # not installed globally: only this span
    try:
        with tracer.start_as_current_span("request") as span:
            log.warning("provider said: invalid key %s", SECRET, extra={"note": f"typed {SECRET}", "attempt": 2})
            try:
                raise RuntimeError(f"boom with {SECRET}")
            except RuntimeError:
                log.exception("unexpected")
        root.setLevel(logging.DEBUG)
        log.debug("below the level the handler was installed at")
        logging.getLogger("opentelemetry.exporter.otlp.proto.http").warning("the exporter's own line")
        worker = threading.Thread(
            target=lambda: logging.getLogger("urllib3").warning("logged while exporting"),
            name="OtelBatchLogRecordProcessor",
        )
        worker.start()
        worker.join()
        log.info("after the others")
    finally:
        root.setLevel(level)
        # Shutdown detaches the handler and flushes the batch (blocking: off the loop the receiver runs on).
        await asyncio.get_running_loop().run_in_executor(None, export.shutdown)
        await receiver.stop()
    assert export.handler not in root.handlers
    records = {item[2].body.string_value: item for item in receiver.logs_by_resource()}
    assert set(records) == {
        "logs: OTLP http/protobuf export",
        "provider said: invalid key ***",
        "unexpected",
        "after the others",
    }
    resource, scope, warned = records["provider said: invalid key ***"]
    assert resource["service.name"] == "eg-in-process" and scope == "effectgate.test_logs"
    context = span.get_span_context()
    assert warned.trace_id.hex() == f"{context.trace_id:032x}" and warned.span_id.hex() == f"{context.span_id:016x}"
    assert attrs(warned.attributes)["note"] == "typed ***" and attrs(warned.attributes)["attempt"] == 2
    failed = attrs(records["unexpected"][2].attributes)
    assert failed["exception.type"] == "RuntimeError" and "boom with ***" in failed["exception.stacktrace"]
    assert records["after the others"][2].trace_id == b""
    assert SECRET not in receiver.dump()
