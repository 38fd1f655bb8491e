"""tests/gateway_forks.py: a test gateway forked from the worker's driver serves, answers signals
and exits as a real `python -m effectgate.gateway` process does, with the environment, working
directory and output the test gave it; what a fork cannot have the same starts as a real process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests import gateway_forks
from tests.gateway_forks import ForkedChild, eligible, popen_gateway, spawn_gateway
from tests.harness import API_KEY_ENV, GatewayProcess, config_doc, stripe_tools


def serving_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def test_what_a_fork_would_share_with_the_driver_starts_a_real_process() -> None:
    assert eligible(serving_env())
    assert not eligible({k: v for k, v in serving_env().items() if k != "PYTHONUNBUFFERED"})
    for name, value in (
        ("EFFECTGATE_CRASH_AT", "after_planned"),  # core/failpoints.py reads it when imported
        ("EFFECTGATE_PAUSE_AT", "after_planned"),
        ("PYTHONHASHSEED", "7"),  # the interpreter's, at its start
        ("SSL_CERT_FILE", "/tmp/ca.pem"),  # aiohttp's SSL contexts, made when it is imported
        ("OTEL_PYTHON_CONTEXT", "contextvars_context"),
        ("TZ", "Asia/Tokyo"),
        (gateway_forks.REAL_GATEWAYS, "1"),
    ):
        assert not eligible(serving_env(**{name: value})), name
    # What the gateway reads when it runs (its store, its keys, OTLP, TMPDIR) may differ.
    assert eligible(serving_env(TMPDIR="/tmp/x", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:1", EG_KEY="k"))
    crashing = GatewayProcess(Path("/nonexistent.toml"), crash_at="after_planned")
    assert isinstance(crashing.proc, subprocess.Popen)  # a process of its own, reading the failpoint
    crashing.kill()


async def test_a_forked_gateway_serves_stops_on_sigterm_and_dies_on_sigkill(
    tmp_path: Path, sim: StripeSimulator
) -> None:
    config = write_config(config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url)), tmp_path / "g.toml")
    for sig, status in ((signal.SIGTERM, 0), (signal.SIGKILL, -signal.SIGKILL)):
        gateway = GatewayProcess(config)
        assert isinstance(gateway.proc, ForkedChild)
        cpu_before = gateway_forks.reaped_cpu()
        port = await gateway.ready()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await gateway_pb2_grpc.EffectGatewayStub(channel).GetAction(pb.GetActionRequest(action_id="a"))
            assert unknown.value.code() == grpc.StatusCode.NOT_FOUND  # from a gateway that serves
        assert gateway.proc.poll() is None
        gateway.proc.send_signal(sig)
        assert await gateway.wait_exit(30) == status
        assert gateway.proc.returncode == status and gateway.proc.poll() == status
        assert gateway_forks.reaped_cpu() > cpu_before  # the driver reaped it and said what it cost
        gateway.proc.send_signal(signal.SIGKILL)  # after its exit: nothing, as Popen does


async def test_a_fork_runs_with_the_tests_environment_working_directory_and_output(tmp_path: Path) -> None:
    # `check` with a relative config path that names a key variable only the test's env has:
    # passes with it; without it, fails on stderr, which is the same pipe as stdout here.
    doc = config_doc("sqlite:///eg.db", **stripe_tools("http://127.0.0.1:9"))
    doc["adapters"]["stripe"]["api_key_env"] = "EG_FORK_ONLY_KEY"
    write_config(doc, tmp_path / "relative.toml")
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        good = popen_gateway(["check", "--config", "relative.toml"], serving_env(EG_FORK_ONLY_KEY="sk_test_1"))
        bad = popen_gateway(["check", "--config", "relative.toml"], serving_env())
    finally:
        os.chdir(here)
    assert isinstance(good, ForkedChild) and isinstance(bad, ForkedChild)
    assert good.wait(60) == 0 and good.stdout is not None
    assert "ok" in good.stdout.read().lower()
    assert bad.wait(60) != 0 and bad.stdout is not None
    assert "EG_FORK_ONLY_KEY" in bad.stdout.read()


async def test_an_async_fork_keeps_stdout_and_stderr_apart(tmp_path: Path) -> None:
    child = await spawn_gateway(["serve"], serving_env())
    out, err = await asyncio.gather(child.stdout.read(), child.stderr.read())
    assert await child.wait() == 2  # argparse's status for a missing option, as a real process
    assert out == b"" and b"--config" in err


def test_a_fork_and_a_real_process_print_the_same_version() -> None:
    real = subprocess.run(
        [sys.executable, "-m", "effectgate.gateway", "--version"], capture_output=True, text=True, check=True
    )
    forked = popen_gateway(["--version"], serving_env())
    assert isinstance(forked, ForkedChild) and forked.stdout is not None
    assert forked.wait(60) == 0
    assert forked.stdout.read() == real.stdout + real.stderr


def test_a_second_driver_is_closed_with_its_forks(tmp_path: Path) -> None:
    driver = gateway_forks.GatewayForks()
    read, write = os.pipe()
    config = write_config(
        config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools("http://127.0.0.1:9")), tmp_path / "g.toml"
    )
    child = driver.spawn(["serve", "--config", str(config)], serving_env(**{API_KEY_ENV: "sk_test_1"}), write, write)
    os.close(write)
    with os.fdopen(read) as output:
        while "serving on port" not in output.readline():
            pass
        driver.close()  # as when the worker exits: the driver kills what it forked
        assert child.wait(30) == -signal.SIGKILL
        for _ in range(3000):  # killed, then reaped by whoever inherits it (init): at most 30 s
            try:
                os.kill(child.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the fork outlived its driver")
