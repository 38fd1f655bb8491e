"""Under `--log-format json` every line the gateway writes, on stdout and stderr, is one JSON
object: its own records, the ready line, and gRPC's C-core lines (a failed TLS handshake), with
OpenTelemetry log data model names, `service.name` and `service.instance.id`."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools
from tests.serve_child import ServeChild
from tests.test_execute import request
from tests.tls_certs import Pki, make_pki

OTEL_KEYS = {"timestamp", "severity_text", "severity_number", "body", "scope.name", "service.name"}


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.mark.parametrize("verbosity", ["", "INFO"], ids=["default", "GRPC_VERBOSITY=INFO"])
async def test_tls_handshake_failure_and_a_request_cycle_are_json_lines_only(
    tmp_path: Path, sim: StripeSimulator, ca: Pki, verbosity: str
) -> None:
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url))
    doc["server"]["tls"] = {"cert_file": str(ca.server_cert), "key_file": str(ca.server_key)}
    doc["telemetry"] = {"service_name": "payments-gateway"}
    env = {"GRPC_VERBOSITY": verbosity} if verbosity else {}
    child = ServeChild.for_config(doc, tmp_path / "eg.toml", before=("--log-format", "json"), env=env)
    await child.start()
    try:
        port = await child.ready()
        target = f"127.0.0.1:{port}"
        # A plaintext client against the TLS port: the handshake fails on the server.
        with grpc.insecure_channel(target) as plain, pytest.raises(grpc.RpcError):
            health_pb2_grpc.HealthStub(plain).Check(health_pb2.HealthCheckRequest(), timeout=3)
        creds = grpc.ssl_channel_credentials(ca.ca.read_bytes())
        async with grpc.aio.secure_channel(target, creds) as channel:
            answer = await gateway_pb2_grpc.EffectGatewayStub(channel).Execute(request(), timeout=30)
            assert answer.action.action_id
        if verbosity == "INFO":  # C-core lines come, as JSON
            await child.until(
                lambda: any('"scope.name":"grpc"' in line and "andshake" in line for line in child.stderr),
                "the handshake failure, as a JSON line",
            )
    finally:
        assert await child.stop() == 0, child.transcript()
    docs = child.json_lines()  # every line parses
    assert docs and all(set(doc) >= OTEL_KEYS for doc in docs), docs
    assert {doc["service.name"] for doc in docs} == {"payments-gateway"}
    instances = {doc["service.instance.id"] for doc in docs}
    assert len(instances) == 1 and all(instances)
    ready = [doc for doc in docs if doc["body"].startswith("effectgate serving on port")]
    assert len(ready) == 1 and ready[0]["port"] == port
    assert any(doc["body"].startswith("action_settled") or doc.get("event") == "action_settled" for doc in docs)
    if not verbosity:  # by default gRPC's INFO lines (every failed handshake) are not logged
        assert not [doc for doc in docs if doc["scope.name"] == "grpc"], docs
