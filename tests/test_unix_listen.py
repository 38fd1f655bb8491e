"""`[server] listen = "unix:PATH"`: the gateway on a Unix socket (a sidecar sharing a volume with
its agent). A real `effectgate serve` reached through the Python client and the health probe at
`unix:PATH`; the address is exclusive like a port (a second gateway there fails to start, the
first keeps serving); a socket file left by a killed gateway is taken over by the next one;
`--workers` and relative or overlong paths are refused in one line."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from effectgate.client import EffectGateClient, run, step
from effectgate.gateway.config import ConfigError, parse_config
from effectgate.gateway.runtime.healthcheck import main as healthcheck
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools
from tests.serve_child import ServeChild


def socket_doc(tmp_path: Path, sim: StripeSimulator, address: str) -> dict[str, Any]:
    return config_doc(f"sqlite:///{tmp_path}/eg.db", listen=address, **stripe_tools(sim.base_url))


async def serving_on(child: ServeChild, address: str) -> None:
    await child.until(lambda: f"effectgate serving on {address}" in child.stdout, "the ready line")


async def charge(address: str, run_id: str) -> str:
    async with EffectGateClient(address) as client:
        with run(run_id), step("charge"):
            payload = ChargeCard(customer="cus_42", amount=1000, currency="usd", payment_method="pm_card_visa")
            answer = await client.execute("charge_card", payload, scope=f"order:{run_id}")
    return answer.action.receipt.external_id


async def test_a_gateway_on_a_unix_socket_serves_and_holds_its_address(tmp_path: Path, sim: StripeSimulator) -> None:
    address = f"unix:{tmp_path}/grpc.sock"
    first = await ServeChild.for_config(socket_doc(tmp_path, sim, address), tmp_path / "eg.toml").start()
    try:
        await serving_on(first, address)
        assert (await charge(address, "run-unix-1")).startswith("pi_")
        assert await asyncio.to_thread(healthcheck, [address]) == 0

        # A second gateway on the same address (its own store) is refused; the first serves on.
        second_dir = tmp_path / "second"
        second_dir.mkdir()
        second = ServeChild.for_config(socket_doc(second_dir, sim, address), second_dir / "eg.toml")
        assert await (await second.start()).exit_code() == 2, second.transcript()
        assert f"cannot listen on {address}: the address is in use" in "\n".join(second.stderr)
        assert (await charge(address, "run-unix-2")).startswith("pi_")

        # Killed, it leaves its socket file behind: the next gateway takes the address over.
        assert first.proc is not None
        first.proc.kill()
        await first.stop()
        assert (tmp_path / "grpc.sock").exists() and (tmp_path / "grpc.sock.lock").exists()  # both stale
        again = await ServeChild.for_config(socket_doc(tmp_path, sim, address), tmp_path / "again.toml").start()
        try:
            await serving_on(again, address)
            assert (await charge(address, "run-unix-3")).startswith("pi_")
        finally:
            assert await again.stop() == 0, again.transcript()
    finally:
        await first.stop()
    assert len([e for e in sim.ledger if e["kind"] == "payment_intent"]) == 3


async def test_a_gateway_killed_before_its_ready_line_leaves_an_address_the_next_one_takes(
    tmp_path: Path, sim: StripeSimulator
) -> None:
    """Killed after its bind but before `serving on` (waiting for its store: the socket is bound,
    health NOT_SERVING), a gateway leaves its socket and its lock; its flock died with it, so the
    next start takes both over, and stops leaving neither."""
    path, lock = tmp_path / "grpc.sock", tmp_path / "grpc.sock.lock"
    address = f"unix:{path}"
    unreachable = config_doc(
        "postgresql://effectgate:secret@127.0.0.1:9/effectgate", listen=address, **stripe_tools(sim.base_url)
    )
    waiting = await ServeChild.for_config(unreachable, tmp_path / "waiting.toml").start()
    try:
        await waiting.until(lambda: any("the store cannot be reached" in line for line in waiting.stderr), "the wait")
        assert not any("serving on" in line for line in waiting.stdout), waiting.transcript()
        assert waiting.proc is not None
        waiting.proc.kill()
        assert await waiting.exit_code() == -9, waiting.transcript()
    finally:
        await waiting.stop()
    assert path.is_socket() and lock.exists()  # both stale
    nxt = await ServeChild.for_config(socket_doc(tmp_path, sim, address), tmp_path / "eg.toml").start()
    try:
        await serving_on(nxt, address)
        assert (await charge(address, "run-unix-killed")).startswith("pi_")
    finally:
        assert await nxt.stop() == 0, nxt.transcript()
    assert not path.exists() and not lock.exists()


async def test_workers_need_a_port(tmp_path: Path, sim: StripeSimulator) -> None:
    address = f"unix:{tmp_path}/grpc.sock"
    child = ServeChild.for_config(socket_doc(tmp_path, sim, address), tmp_path / "eg.toml", "--workers", "2")
    assert await (await child.start()).exit_code() == 2, child.transcript()
    assert [line for line in child.stderr if line.strip()] == [
        f"effectgate: --workers: needs a HOST:PORT [server] listen, not the Unix socket {address}"
    ], child.transcript()


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("unix:grpc.sock", "a Unix socket's path must be absolute"),
        ("unix:/" + "d" * 120 + "/grpc.sock", "a Unix socket's path is at most 107 bytes"),
    ],
)
def test_socket_paths_that_cannot_work_are_refused(address: str, said: str) -> None:
    doc = config_doc("sqlite:///eg.db", listen=address, **stripe_tools("http://127.0.0.1:9"))
    with pytest.raises(ConfigError, match=said):
        parse_config(doc)


def test_a_unix_socket_is_local_like_loopback() -> None:
    # Development mode (no principals) binds local addresses only; a socket file is one.
    doc = config_doc("sqlite:///eg.db", listen="unix:/run/effectgate/grpc.sock", **stripe_tools("http://127.0.0.1:9"))
    config = parse_config(doc)
    assert config.dev_mode and not config.plaintext_exposed
