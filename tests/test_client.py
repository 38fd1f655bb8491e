"""The client package: installs alone (grpcio, grpcio-status, protobuf, googleapis-common-protos,
with version ranges), and its run context behaves as agent
runtimes need (stable steps, subagents inherit the run, asyncio tasks carry the context)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from effectgate.client import (
    EffectGateError,
    PayloadMismatch,
    PolicyConflict,
    RetryPolicy,
    RunContext,
    Unavailable,
    current,
    run,
    stable_step_id,
    step,
    subagent,
)
from effectgate.client.cli import printable
from effectgate.client.errors import from_rpc_error
from tests.wheelhouse import fresh_venv, pip_install, wheel


def test_run_step_and_subagents() -> None:
    with pytest.raises(LookupError):
        current()
    with run("run-9", agent="planner"):
        with step("charge-deposit"):
            assert current() == RunContext("run-9", "charge-deposit", agent="planner")
            with subagent("billing"):
                assert current().run_id == "run-9" and current().step_id == "charge-deposit"
                assert current().agent == "billing"
        assert current().step_id == ""
    with pytest.raises(LookupError):
        current()


async def test_context_follows_asyncio_tasks() -> None:
    async def worker(name: str) -> RunContext:
        with subagent(name):
            await asyncio.sleep(0)
            return current()

    with run("run-1"), step("s"):
        seen = await asyncio.gather(worker("a"), worker("b"))
    assert {c.agent for c in seen} == {"a", "b"}
    assert {(c.run_id, c.step_id) for c in seen} == {("run-1", "s")}


def test_stable_step_ids() -> None:
    assert stable_step_id("node", 3, "order:7") == stable_step_id("node", 3, "order:7")
    assert stable_step_id("node", 3) != stable_step_id("node", 4)
    assert stable_step_id("a|b", "c") != stable_step_id("a", "b|c")


@pytest.mark.timeout(900)  # the run's wheelhouse may be building (tests/wheelhouse.py)
def test_client_installs_alone(tmp_path: Path, wheelhouse_dir: Path) -> None:
    """A fresh virtualenv gets the client (its wheel and the protos', built once per run:
    tests/wheelhouse.py), its operator CLI and its eight dependencies (the generated stubs of
    effectgate-protos, rich and PyYAML for the CLI's output, Babel for its money; ranges, never
    `==` pins that would clash with agent frameworks) and nothing of the gateway. The client and
    the stubs ship disjoint parts of the namespace."""
    python = fresh_venv(tmp_path / "venv")
    client = [str(wheel(wheelhouse_dir, name)) for name in ("effectgate-protos", "effectgate-client")]
    subprocess.run(pip_install(python, *client), check=True, timeout=300, capture_output=True)
    probe = (
        "import importlib.metadata as m, importlib.util as u, re\n"
        "import effectgate.client.cli, effectgate.v1.gateway_pb2_grpc, effectgate.tools.v1.tools_pb2\n"
        "from effectgate.client import State, SyncEffectGateClient, PayloadMismatch\n"
        "assert u.find_spec('effectgate.gateway') is None\n"
        "reqs = [r for r in m.requires('effectgate-client') if 'extra ==' not in r]  # framework extras\n"
        "assert not any('==' in r for r in reqs), reqs\n"
        "print(sorted(re.split('[<>=!~ ]', r)[0] for r in reqs))\n"
        "def parts(d): return sorted({'/'.join(f.parts[:2]) for f in m.files(d) if f.suffix == '.py'})\n"
        "assert parts('effectgate-client') == ['effectgate/client'], parts('effectgate-client')\n"
        "assert parts('effectgate-protos') == ['effectgate/tools', 'effectgate/v1'], parts('effectgate-protos')\n"
    )
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    names = ["PyYAML", "babel", "effectgate-protos", "googleapis-common-protos", "grpcio", "grpcio-status"]
    want = str([*names, "protobuf", "rich"])
    assert done.stdout.strip() == want
    help_text = subprocess.run(
        [str(python), "-m", "effectgate.client.cli", "actions", "--help"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "--tls-ca" in help_text and "--tls-cert" in help_text


def rpc_error(code: grpc.StatusCode, reason: str, *extra: Message) -> grpc.aio.AioRpcError:
    """An AioRpcError as grpc.aio raises it, with google.rpc details in the trailers."""
    details = [error_details_pb2.ErrorInfo(reason=reason, domain="effectgate.dev", metadata={"action_id": "act_1"})]
    packed = []
    for message in [*details, *extra]:
        any_detail = any_pb2.Any()
        any_detail.Pack(message)
        packed.append(any_detail)
    status = status_pb2.Status(code=code.value[0], message="m", details=packed)
    trailers = grpc.aio.Metadata(*rpc_status.to_status(status).trailing_metadata)
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailers, "m", None)


def test_reasons_map_to_typed_errors_and_unknown_ones_stay_typed_by_code() -> None:
    wait = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2, nanos=500_000_000))
    limited = from_rpc_error(rpc_error(grpc.StatusCode.UNAVAILABLE, "PROVIDER_RATE_LIMITED", wait))
    assert isinstance(limited, Unavailable) and limited.reason == "PROVIDER_RATE_LIMITED"
    assert limited.retry_after == 2.5 and limited.action_id == "act_1"
    assert RetryPolicy().delay(limited, attempt=1, elapsed=0) == 2.5
    assert RetryPolicy(total_budget=2).delay(limited, attempt=1, elapsed=0) is None
    assert RetryPolicy(max_attempts=1).delay(limited, attempt=1, elapsed=0) is None
    future = from_rpc_error(rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "SOMETHING_NEW"))
    assert type(future) is PolicyConflict and future.reason == "SOMETHING_NEW"
    odd = from_rpc_error(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "TOO_BIG"))
    assert type(odd) is EffectGateError and odd.reason == "TOO_BIG"
    assert RetryPolicy().delay(odd, attempt=1, elapsed=0) is None
    mismatch = from_rpc_error(rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "PAYLOAD_MISMATCH"))
    assert isinstance(mismatch, PayloadMismatch) and isinstance(mismatch, grpc.aio.AioRpcError)
    # Aborted for another reason than IN_FLIGHT is not known to be safe: no retry.
    aborted = from_rpc_error(rpc_error(grpc.StatusCode.ABORTED, "SOMETHING_ELSE"))
    assert RetryPolicy().delay(aborted, attempt=1, elapsed=0) is None


def test_cli_escapes_control_characters() -> None:
    assert printable("order:7\x1b[31mPAID\r\n\u202e") == "order:7\\x1b[31mPAID\\r\\n\\u202e"
    assert printable("cus_42 ünïcode") == "cus_42 ünïcode"
    assert printable("10,00\xa0$ 5\u202f000\u2028") == "10,00\xa0$ 5\u202f000\\u2028"  # spaces stay, separators not
