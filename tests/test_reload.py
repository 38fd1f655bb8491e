"""SIGHUP swaps a principal's token under load: after the reload every call with the new token
passes and the old token is refused; no call fails on the way; a file that does not load keeps
the running set, with one line. Also for a `--workers` pool, whose parent relays the signal, and
for a config replaced the way kubelet replaces a mounted ConfigMap (a `..data` symlink swap)."""

from __future__ import annotations

import asyncio
import hashlib
import signal
from pathlib import Path
from typing import Any

import grpc
import pytest

from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools
from tests.serve_child import ServeChild
from tests.test_execute import request
from tests.tls_certs import Pki, make_pki

OLD, NEW = "old-token-0123456789", "new-token-9876543210"


def principal(token: str) -> dict[str, Any]:
    return {
        "name": "agent",
        "tenant": "acme",
        "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
        "roles": ["agent"],
    }


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


@pytest.mark.parametrize("workers", [0, 2], ids=["single", "workers"])
async def test_sighup_swaps_a_token_under_load(tmp_path: Path, sim: StripeSimulator, workers: int) -> None:
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", principals=[principal(OLD)], **stripe_tools(sim.base_url))
    path = tmp_path / "eg.toml"
    options = ("--workers", str(workers)) if workers else ()
    child = await ServeChild.for_config(doc, path, *options).start()
    results: list[tuple[str, str, grpc.StatusCode]] = []  # (token, phase, code)
    phase = "before"
    stop = asyncio.Event()
    counter = 0

    async def load(lane: int) -> None:
        nonlocal counter
        async with grpc.aio.insecure_channel(target) as channel:
            stub = gateway_pb2_grpc.EffectGatewayStub(channel)
            while not stop.is_set():
                token = NEW if phase == "after" else OLD
                seen, counter = phase, counter + 1
                try:
                    await stub.Execute(request(step=f"l{lane}-{counter}"), metadata=bearer(token), timeout=30)
                    code = grpc.StatusCode.OK
                except grpc.aio.AioRpcError as exc:
                    code = exc.code()
                # A call still in flight when the swap began belongs to the swap: on a busy machine
                # the server may read its token after the reload.
                results.append((token, seen if phase == seen else "reloading", code))

    try:
        target = f"127.0.0.1:{await child.ready()}"
        lanes = [asyncio.create_task(load(n)) for n in range(4)]
        await child.until(lambda: len(results) >= 20, "calls with the old token")
        write_config({**doc, "principals": [principal(NEW)]}, path)
        phase = "reloading"
        child.signal(signal.SIGHUP)
        expected = max(workers, 1)
        await child.until(lambda: sum("reloaded" in line for line in child.stderr) >= expected, "the reload lines")
        phase = "after"
        mark = len(results)
        await child.until(lambda: len(results) >= mark + 40, "calls with the new token")
        stop.set()
        await asyncio.gather(*lanes)

        before = [code for token, seen, code in results if seen == "before"]
        assert before and set(before) == {grpc.StatusCode.OK}
        after = [code for token, seen, code in results[mark:] if seen == "after"]
        assert after and set(after) == {grpc.StatusCode.OK}, after  # no call with the new token failed
        # During the swap an old-token call passes or is refused: never another failure.
        during = {code for token, seen, code in results if seen == "reloading"}
        assert during <= {grpc.StatusCode.OK, grpc.StatusCode.UNAUTHENTICATED}
        async with grpc.aio.insecure_channel(target) as channel:
            stub = gateway_pb2_grpc.EffectGatewayStub(channel)
            for n in range(4):  # every worker refuses the old token (new connections spread)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.Execute(
                        request(step=f"old{n}"), metadata=(("authorization", f"Bearer {OLD}"),), timeout=10
                    )
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED

        # A file that does not load: the running set stays, one line says why.
        path.write_text(path.read_text() + "\n[server\n")
        child.signal(signal.SIGHUP)
        await child.until(lambda: sum("reload refused" in line for line in child.stderr) >= expected, "refusals")
        refusals = [line for line in child.stderr if "reload refused" in line]
        assert all("not valid TOML" in line for line in refusals)
        async with grpc.aio.insecure_channel(target) as channel:
            stub = gateway_pb2_grpc.EffectGatewayStub(channel)
            answer = await stub.Execute(
                request(step="still"), metadata=(("authorization", f"Bearer {NEW}"),), timeout=30
            )
            assert answer.action.action_id
    finally:
        stop.set()
        assert await child.stop() == 0, child.transcript()


async def test_sighup_swaps_the_tls_certificate(tmp_path: Path, sim: StripeSimulator) -> None:
    old_ca, new_ca = make_pki(tmp_path / "old"), make_pki(tmp_path / "new")
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", principals=[principal(NEW)], **stripe_tools(sim.base_url))
    doc["server"]["tls"] = {"cert_file": str(old_ca.server_cert), "key_file": str(old_ca.server_key)}
    path = tmp_path / "eg.toml"
    child = await ServeChild.for_config(doc, path).start()

    async def call(ca: Pki) -> None:
        creds = grpc.ssl_channel_credentials(ca.ca.read_bytes())
        async with grpc.aio.secure_channel(target, creds) as channel:
            stub = gateway_pb2_grpc.EffectGatewayStub(channel)
            await stub.Execute(request(step="tls"), metadata=bearer(NEW), timeout=10)

    try:
        target = f"127.0.0.1:{await child.ready()}"
        await call(old_ca)
        doc["server"]["tls"] = {"cert_file": str(new_ca.server_cert), "key_file": str(new_ca.server_key)}
        write_config(doc, path)
        child.signal(signal.SIGHUP)
        await child.until(lambda: any("reloaded" in line for line in child.stderr), "the reload line")
        await call(new_ca)  # a new connection gets the new certificate
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call(old_ca)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        assert await child.stop() == 0, child.transcript()


def kubelet_write(directory: Path, doc: dict[str, Any], generation: int) -> None:
    """What kubelet does when a mounted ConfigMap changes: the files go into a new timestamped
    directory, a `..data_tmp` symlink to it is renamed over `..data` (atomic), and the visible
    file is a symlink through `..data` that never changes itself."""
    payload = directory / f"..2026_12_02_00_00_0{generation}.000000001"
    payload.mkdir()
    write_config(doc, payload / "eg.toml")
    (directory / "..data_tmp").symlink_to(payload.name)
    (directory / "..data_tmp").rename(directory / "..data")
    if not (directory / "eg.toml").is_symlink():
        (directory / "eg.toml").symlink_to("..data/eg.toml")


async def test_sighup_reads_a_configmap_replaced_by_a_symlink_swap(tmp_path: Path, sim: StripeSimulator) -> None:
    mounted = tmp_path / "config"
    mounted.mkdir()
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", principals=[principal(OLD)], **stripe_tools(sim.base_url))
    kubelet_write(mounted, doc, 1)
    child = await ServeChild(["serve", "--config", str(mounted / "eg.toml")]).start()
    try:
        target = f"127.0.0.1:{await child.ready()}"
        async with grpc.aio.insecure_channel(target) as channel:
            stub = gateway_pb2_grpc.EffectGatewayStub(channel)
            await stub.Execute(request(step="before"), metadata=bearer(OLD), timeout=30)
            kubelet_write(mounted, {**doc, "principals": [principal(NEW)]}, 2)
            assert (mounted / "eg.toml").resolve().parent.name.endswith("02.000000001")
            child.signal(signal.SIGHUP)
            await child.until(lambda: any("reloaded" in line for line in child.stderr), "the reload line")
            answer = await stub.Execute(request(step="after"), metadata=bearer(NEW), timeout=30)
            assert answer.action.action_id
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Execute(request(step="old"), metadata=bearer(OLD), timeout=30)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        assert await child.stop() == 0, child.transcript()
