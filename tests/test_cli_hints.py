"""The CLI for a newcomer: a failure says what to do next. A gateway that is down, one that never
answers, a missing or wrong token each get a hint naming the flag and the variable; refusals say
how to allow what was refused; a mistyped command, choice or option gets one line with a
did-you-mean instead of the whole usage; the shell can complete commands (argcomplete); and
Ctrl-C at any moment of the CLI or the demo is one line and exit 130, never a traceback."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from effectgate.gateway.runtime.cli import docstring_in_source, top_level_help
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from tests import test_operator_cli
from tests.otlp_receiver import ChildGateway
from tests.ports import closed_port
from tests.test_operator_cli import cli, execute

# The operator CLI tests' gateway (a real `effectgate serve` with principals) and its simulator.
sim = test_operator_cli.sim
served = test_operator_cli.served

EFFECTGATE = [sys.executable, "-m", "effectgate.gateway"]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a wrong service, a hung host)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(16)
        yield holder.getsockname()[1]


async def test_a_gateway_that_is_down_gets_a_hint_naming_target_and_variable() -> None:
    with closed_port() as port:  # held: nobody else listens there meanwhile
        _, _, err = await cli("actions", "--target", f"127.0.0.1:{port}", check=1)
    assert "UNAVAILABLE" in err and "Traceback" not in err
    assert f"is a gateway running at 127.0.0.1:{port}?" in err
    assert "--target" in err and "EFFECTGATE_TARGET" in err


async def test_a_gateway_that_never_answers_is_given_up_at_the_timeout(silent_port: int) -> None:
    _, _, err = await cli("show", "act_x", "--target", f"127.0.0.1:{silent_port}", "--timeout", "1s", check=1)
    assert "DEADLINE_EXCEEDED" in err and "did not answer within 1s" in err and "--timeout" in err


async def test_no_token_and_a_wrong_token_name_the_variable(served: tuple[ChildGateway, str]) -> None:
    _, target = served
    env = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_")}
    for token, words in (("", "is empty"), ("not-a-token", "holds a token the gateway does not know")):
        proc = await asyncio.create_subprocess_exec(
            *EFFECTGATE, "actions", "--target", target,
            env=env | {"EFFECTGATE_TOKEN": token}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
        err = err_bytes.decode()
        assert proc.returncode == 1 and "UNAUTHENTICATED" in err, err
        assert f"$EFFECTGATE_TOKEN {words}" in err and "--token-env" in err


async def test_refusals_say_how_to_allow_what_they_refused(served: tuple[ChildGateway, str]) -> None:
    _, target = served
    action = await execute(target, "hint-bypass")  # charge_card: bypass = "never"
    _, _, err = await cli("grant-bypass", action.action_id, "--note", "again", target=target, check=1)
    assert 'bypass = "operator"' in err and "[tools.charge_card]" in err


async def test_a_tool_outside_the_allow_list_names_the_tool_and_the_list(tmp_path: Path) -> None:
    from tests.harness import config_doc, stripe_tools
    from tests.test_operator_cli import PRINCIPALS, TOKEN

    principals = [{**PRINCIPALS[0], "tools": ["charge_card"]}]
    doc = config_doc(f"sqlite:///{tmp_path}/eg.db", principals=principals, **stripe_tools("http://127.0.0.1:9"))
    doc["tools"]["send_receipt"] = dict(doc["tools"]["charge_card"])
    gateway = ChildGateway(doc, tmp_path, {})
    try:
        target = await gateway.ready()
        message = pb.ExecuteRequest()
        message.CopyFrom(__import__("tests.test_execute", fromlist=["request"]).request(step="s1"))
        message.tool = "send_receipt"
        async with grpc.aio.insecure_channel(target) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await gateway_pb2_grpc.EffectGatewayStub(channel).Execute(
                    message, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=30
                )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        text = refused.value.details() or ""
        assert "'send_receipt'" in text and "charge_card" in text and "tools" in text
    finally:
        await gateway.terminate()


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["acions"], "did you mean 'actions'?"),
        (["actions", "--state", "unknwn"], "did you mean 'UNKNOWN'?"),
        (["actions", "--limt", "3"], "did you mean '--limit'?"),
        (["reconcile", "act_1", "--note", "x", "--resolution", "confirmd"], "did you mean 'CONFIRMED'?"),
    ],
)
def test_a_usage_error_is_one_line_with_a_did_you_mean(argv: list[str], wanted: str) -> None:
    done = subprocess.run([*EFFECTGATE, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and wanted in lines[0] and "--help" in lines[1], done.stderr
    assert "usage:" not in done.stderr


def test_the_shell_completes_commands_and_options(tmp_path: Path) -> None:
    """argcomplete's protocol, as `eval "$(register-python-argcomplete effectgate)"` drives it."""
    answers = tmp_path / "completions"
    for line, wanted in (("effectgate app", "approve"), ("effectgate actions --sta", "--state")):
        env = os.environ | {
            "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line, "COMP_POINT": str(len(line)),
            "_ARGCOMPLETE_STDOUT_FILENAME": str(answers),
        }  # fmt: skip
        done = subprocess.run([*EFFECTGATE], env=env, capture_output=True, text=True, timeout=60)
        words = answers.read_text().split()
        assert wanted in words, (line, words, done.stderr)


@pytest.fixture
def hung_gateway() -> Iterator[int]:
    """A gRPC server that takes every call and never answers it (until the test ends): a CLI
    aimed at it waits for its own deadline, however slowly a loaded machine runs. (A socket that
    is never accepted from is given up on by gRPC after its 20 s connect timeout, as UNAVAILABLE:
    the end of the CLI would then depend on gRPC's timer instead of the Ctrl-C.)"""
    released = threading.Event()

    def hang(request: bytes, context: grpc.ServicerContext) -> bytes:
        released.wait(120)
        context.abort(grpc.StatusCode.UNAVAILABLE, "the test ended")

    service = pb.DESCRIPTOR.services_by_name["EffectGateway"]
    unary = [m.name for m in service.methods if not (m.client_streaming or m.server_streaming)]
    handler = grpc.method_handlers_generic_handler(
        service.full_name, {name: grpc.unary_unary_rpc_method_handler(hang) for name in unary}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=4), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        released.set()
        server.stop(grace=None).wait(30)


def _interrupt(argv: list[str], after: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`argv`, sent SIGINT `after` seconds after it started, unless it ended on its own first
    (the returncode then tells which)."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        try:
            child.wait(timeout=after)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=90)
    finally:
        child.kill()
    return subprocess.CompletedProcess(argv, child.returncode, out, err)


# From 0.1 s on: before that the interpreter itself is starting, ahead of any of the project's code.
# One generator for the six (a new Random(36) per moment made all six the same, 1.05 s).
_moments = random.Random(36)
MOMENTS = sorted(_moments.uniform(0.1, 3.0) for _ in range(6))


@pytest.mark.parametrize("after", MOMENTS, ids=[f"{m:.2f}s" for m in MOMENTS])
def test_ctrl_c_at_any_moment_of_the_cli_is_one_line_and_exit_130(hung_gateway: int, after: float) -> None:
    # The gateway never answers and the deadline is a minute away: the CLI is still running when
    # the signal comes, whether it is loading its modules, connecting or waiting for the answer.
    done = _interrupt([*EFFECTGATE, "actions", "--target", f"127.0.0.1:{hung_gateway}", "--timeout", "60s"], after)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1 and "interrupted" in done.stderr


_demo_moments = random.Random(7)
DEMO_MOMENTS = sorted(_demo_moments.uniform(0.1, 6.0) for _ in range(4))


@pytest.mark.parametrize("after", DEMO_MOMENTS, ids=[f"{m:.2f}s" for m in DEMO_MOMENTS])
def test_ctrl_c_at_any_moment_of_the_demo_prints_no_traceback_and_leaves_no_folder(
    tmp_path: Path, after: float
) -> None:
    env = os.environ | {"TMPDIR": str(tmp_path)}
    done = _interrupt([sys.executable, "-m", "effectgate_lab.demo"], after, env)
    assert "Traceback" not in done.stderr, done.stderr
    # 0: it had finished. 130, or ended by the SIGINT itself after its line (a shell shows both
    # as 130): seen once at 0.53 s, while the interpreter was still loading the demo's modules.
    assert done.returncode in (0, 130, -signal.SIGINT), (done.returncode, done.stderr)
    if done.returncode != 0:
        assert done.stderr.strip().splitlines()[-1] == "demo interrupted"
    assert not list(tmp_path.glob("effectgate-demo-*"))


def test_only_the_list_of_commands_loads_the_plug_ins_for_their_summaries() -> None:
    names = {"serve", "actions", "chaos"}
    assert top_level_help([], names) and top_level_help(["--help"], names)
    assert top_level_help(["--log-level", "debug", "-h"], names)
    assert not top_level_help(["serve", "--help"], names) and not top_level_help(["actions", "-h"], names)
    assert not top_level_help(["serve"], names)


PLUG_IN_MODULES = ("effectgate_lab.chaos.cli", "effectgate_lab.dev", "effectgate.mcp.cli", "effectgate.console.cli")


def help_of(*argv: str) -> tuple[str, str]:
    """`effectgate ARGV` run in a fresh interpreter: what it printed, and then the plug-in modules
    it loaded (as a last line `LOADED [...]`)."""
    code = (
        "import sys\nfrom effectgate.gateway.runtime.cli import main\n"
        f"try:\n    main({list(argv)!r})\nexcept SystemExit:\n    pass\n"
        f"print('LOADED', sorted(m for m in {PLUG_IN_MODULES!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    *printed, loaded = done.stdout.splitlines()
    return "\n".join(printed), loaded


def test_an_operator_commands_help_loads_no_plug_in() -> None:
    # `effectgate actions --help` printed its own help after loading every plug-in (the lab's
    # `chaos` alone: two seconds of imports) to summarize commands it never listed.
    printed, loaded = help_of("actions", "--help")
    assert "usage: effectgate actions" in printed and loaded == "LOADED []", (printed, loaded)


def test_the_list_of_commands_summarizes_the_plug_ins_from_their_source_without_loading_them() -> None:
    from effectgate.console.cli import main as console_main
    from effectgate_lab.chaos.cli import main as chaos_main

    printed, loaded = help_of("--help")
    assert loaded == "LOADED []", loaded
    for command, doc in (("chaos", chaos_main.__doc__), ("console", console_main.__doc__)):
        assert doc and docstring_in_source(f"{command_module(command)}:main") == doc.strip()
        assert " ".join(doc.split()[:4]) in " ".join(printed.split()), (command, printed)


def command_module(command: str) -> str:
    return {"chaos": "effectgate_lab.chaos.cli", "console": "effectgate.console.cli"}[command]


@pytest.mark.parametrize(
    "target",
    [
        "effectgate_nowhere.cli:main",
        "effectgate_lab.chaos.cli",
        "effectgate_lab.chaos.cli:no_such_function",
        "effectgate_lab.chaos.cli:main.attr",
        "effectgate_lab:main",
    ],
)
def test_a_target_not_found_as_a_function_in_source_is_left_to_loading(target: str) -> None:
    # None: the help then loads the plug-in, as it always did (a broken one says it failed to load).
    assert docstring_in_source(target) is None
