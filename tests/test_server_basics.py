"""What operators meet first: health, reflection, the container's health check, config errors."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from effectgate.gateway.config import ConfigError, parse_config, parse_duration
from effectgate.gateway.runtime import healthcheck
from effectgate.gateway.runtime.server import Gateway
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import API_KEY, LiveGateway, config_doc, start_gateway, stripe_tools

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[LiveGateway]:
    sim = StripeSimulator(api_key=API_KEY)
    await sim.start()
    gateway = await start_gateway(config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url)))
    yield gateway
    await gateway.close()
    await sim.stop()


async def test_health_service_reports_serving(live: LiveGateway) -> None:
    stub = health_pb2_grpc.HealthStub(live.channel)
    for service in ("", "effectgate.v1.EffectGateway", "effectgate.v1.Operator"):
        answer = await stub.Check(health_pb2.HealthCheckRequest(service=service))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    # The container health check speaks the same protocol (blocking client, in a thread).
    assert await asyncio.to_thread(healthcheck.check, live.target)
    assert not await asyncio.to_thread(healthcheck.check, "127.0.0.1:1", 0.5)


async def test_reflection_lists_the_services(live: LiveGateway) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(live.channel)

    async def ask() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        yield reflection_pb2.ServerReflectionRequest(list_services="")

    names = set()
    async for answer in stub.ServerReflectionInfo(ask()):
        names |= {s.name for s in answer.list_services_response.service}
    assert {"effectgate.v1.EffectGateway", "effectgate.v1.Operator", "grpc.health.v1.Health"} <= names


def test_dev_mode_refuses_non_loopback() -> None:
    doc = config_doc("sqlite:///x.db", listen="0.0.0.0:50051", **stripe_tools("http://127.0.0.1:1"))
    with pytest.raises(ConfigError, match="development mode"):
        parse_config(doc)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"tools": {"t": {"adapter": "nope"}}}, r"\[tools.t\] adapter: 'nope' is not an \[adapters"),
        ({"tools": {"t": {"adapter": "stripe", "on_repeat": "sometimes"}}}, r"\[tools.t\] on_repeat: 'sometimes'"),
        ({"tools": {"t": {"adapter": "stripe", "deadline": "soon"}}}, "deadline: 'soon' is not a duration"),
        ({"tools": {"t": {"adapter": "stripe", "colour": "red"}}}, r"\[tools.t\] colour: unknown key"),
        ({"principals": [{"name": "a", "tenant": "t", "token_sha256": "abc"}]}, "hex SHA-256"),
    ],
)
def test_config_errors_name_the_key(patch: dict[str, object], message: str) -> None:
    doc: dict[str, object] = {"adapters": {"stripe": {}}, **patch}
    with pytest.raises(ConfigError, match=message):
        parse_config(doc)


def test_durations() -> None:
    assert parse_duration("500ms", "k") == 0.5
    assert parse_duration("2s", "k") == 2.0
    assert parse_duration("1h", "k") == 3600.0
    assert parse_duration(3, "k") == 3.0


def test_serve_exits_2_with_a_clear_message_on_bad_config(tmp_path: Path) -> None:
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools("http://127.0.0.1:1"))
    doc["adapters"]["stripe"]["api_key_env"] = "EFFECTGATE_TEST_UNSET_VARIABLE"
    config = write_config(doc, tmp_path / "bad.toml")
    done = subprocess.run(
        [sys.executable, "-m", "effectgate.gateway", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "EFFECTGATE_TEST_UNSET_VARIABLE" in done.stderr and "Traceback" not in done.stderr


def test_dockerfile_runs_what_we_test() -> None:
    """No Docker engine here: check the image's contract against the code it runs."""
    text = (ROOT / "Dockerfile").read_text()
    # The base image is an ARG (pinned by digest in production builds): its default is Python slim.
    assert re.search(r"^ARG BASE_IMAGE=python:3\.\d+-slim$", text, re.M) and re.search(
        r"^FROM \$\{BASE_IMAGE\}", text, re.M
    )
    user = re.search(r"^USER (\S+)", text, re.M)
    assert user and user.group(1) not in ("root", "0")
    assert "effectgate.gateway.runtime.healthcheck" in text and "HEALTHCHECK" in text
    assert re.search(r'^ENTRYPOINT \["effectgate"\]', text, re.M)
    assert '"serve", "--config"' in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'effectgate = "effectgate.gateway.runtime.entry:main"' in pyproject


@pytest.fixture
def tls_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost (Debian's openssl)."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


async def test_tls_listener(tmp_path: Path, tls_pair: tuple[Path, Path]) -> None:
    """A TLS listener (as production uses with principals) serves the generated client over TLS."""
    cert, key = tls_pair
    sim = StripeSimulator(api_key=API_KEY)
    await sim.start()
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url))
    doc["server"]["tls"] = {"cert_file": str(cert), "key_file": str(key)}
    gateway = await Gateway.start(parse_config(doc))
    try:
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        async with grpc.aio.secure_channel(f"localhost:{gateway.port}", credentials) as channel:
            answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as plain:
            with pytest.raises(grpc.aio.AioRpcError):
                await health_pb2_grpc.HealthStub(plain).Check(health_pb2.HealthCheckRequest(), timeout=2)
    finally:
        await gateway.stop()
        await sim.stop()
