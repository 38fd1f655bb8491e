"""TLS and mTLS on a real gateway (port 0) with a test CA: principals' tokens travel encrypted,
a client without a certificate is refused when client certificates are required, and the
container's health check speaks both."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from effectgate.gateway.config import parse_config
from effectgate.gateway.runtime import healthcheck
from effectgate.gateway.runtime.server import Gateway
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools
from tests.test_execute import request
from tests.tls_certs import Pki, make_pki

TOKEN = "mtls-agent-token"
PRINCIPALS = [{"name": "bot", "tenant": "acme", "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def start(tmp_path: Path, sim: StripeSimulator, tls: dict[str, str]) -> Gateway:
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", principals=PRINCIPALS, **stripe_tools(sim.base_url))
    doc["server"]["tls"] = tls
    return await Gateway.start(parse_config(doc))


def credentials(pki: Pki, *, client_cert: bool) -> grpc.ChannelCredentials:
    if not client_cert:
        return grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
    return grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=pki.client_key.read_bytes(),
        certificate_chain=pki.client_cert.read_bytes(),
    )


async def test_mtls_serves_clients_with_a_certificate_and_refuses_others(
    tmp_path: Path, sim: StripeSimulator, pki: Pki
) -> None:
    tls = {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key), "client_ca_file": str(pki.ca)}
    gateway = await start(tmp_path, sim, tls)
    target = f"localhost:{gateway.port}"
    try:
        async with grpc.aio.secure_channel(target, credentials(pki, client_cert=True)) as channel:
            answer = await gateway_pb2_grpc.EffectGatewayStub(channel).Execute(
                request(), metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=30
            )
            assert answer.action.tenant == "acme" and answer.action.receipt.external_id
        # TLS without a client certificate: the handshake fails, nothing reaches a handler.
        async with grpc.aio.secure_channel(target, credentials(pki, client_cert=False)) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        async with grpc.aio.insecure_channel(target) as plain:
            with pytest.raises(grpc.aio.AioRpcError):
                await health_pb2_grpc.HealthStub(plain).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert len([e for e in sim.ledger if e["kind"] == "payment_intent"]) == 1

        # The container health check, as the Dockerfile runs it (blocking client, in a thread).
        with_cert = healthcheck.Tls(str(pki.ca), str(pki.client_cert), str(pki.client_key))
        assert await asyncio.to_thread(healthcheck.check, target, 5.0, with_cert)
        assert not await asyncio.to_thread(healthcheck.check, target, 2.0, healthcheck.Tls(str(pki.ca)))
        # By IP with the certificate's name given explicitly (a cert issued for a DNS name).
        by_ip = healthcheck.Tls(str(pki.ca), str(pki.client_cert), str(pki.client_key), server_name="localhost")
        assert await asyncio.to_thread(healthcheck.check, f"127.0.0.1:{gateway.port}", 5.0, by_ip)
    finally:
        await gateway.stop()


async def test_health_check_over_tls_from_the_command_line(tmp_path: Path, sim: StripeSimulator, pki: Pki) -> None:
    gateway = await start(tmp_path, sim, {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)})
    try:
        target = f"localhost:{gateway.port}"
        env = {**os.environ, "EFFECTGATE_TLS_CA": str(pki.ca)}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "effectgate.gateway.runtime.healthcheck", target, env=env
        )
        assert await asyncio.wait_for(process.wait(), 60) == 0
        # Without the CA the check cannot speak TLS: it reports unhealthy rather than hanging.
        assert not await asyncio.to_thread(healthcheck.check, target, 2.0)
    finally:
        await gateway.stop()
