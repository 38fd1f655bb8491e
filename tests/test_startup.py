"""Start-up as people meet it, on real `effectgate serve` / `effectgate check` processes: every
mistake (a typo, a taken port, a missing file, an unreachable database, plaintext tokens on the
network) is one line on stderr and exit status 2, never a traceback, never a silent default.
The many refused configs run as forks of one process that loaded the command line once
(tests/cli_forks.py); the first typo, the ports, the workers, --debug, the JSON log and a good
config run as `python -m effectgate.gateway` processes of their own (the whole command's wiring)."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1.gateway_pb2_grpc import EffectGatewayStub
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests import pg
from tests.cli_forks import CliForks
from tests.harness import API_KEY_ENV, GatewayProcess
from tests.ports import nowhere
from tests.test_execute import request


def charge(index: int) -> pb.ExecuteRequest:
    return request(run=f"run-{index}")


LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ")
DIGEST = hashlib.sha256(b"agent-token").hexdigest()
PRINCIPAL = f'[[principals]]\nname = "bot"\ntenant = "acme"\ntoken_sha256 = "{DIGEST}"\n'


def base_toml(
    tmp_path: Path, *, server: str = "", store: str = "", gateway: str = "", adapter: str = "", tail: str = ""
) -> str:
    return f"""
[server]
listen = "127.0.0.1:0"
{server}
[store]
url = "sqlite:///{tmp_path}/eg.db"
{store}
[gateway]
lease_ttl = "30s"
{gateway}
[adapters.stripe]
api_base = "http://127.0.0.1:9"
api_key_env = "{API_KEY_ENV}"
timeout = 5
{adapter}
[tools.charge_card]
adapter = "stripe"
{tail}
"""


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "effectgate.gateway", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, **(env or {})},
    )


def forked(forks: CliForks, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """As run_cli, in a fork (tests/cli_forks.py)."""
    return forks.run(*args, env={**os.environ, **(env or {})})


def one_line_failure(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The process exited 2 with exactly one non-log line on stderr, naming every needle."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and not LOG_LINE.match(line)]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("effectgate: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def write(tmp_path: Path, text: str, name: str = "effectgate.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


TYPOS = {
    "listn": ({"server": 'listn = "127.0.0.1:50051"'}, "[server] listn: unknown key (did you mean listen?)"),
    "lease_tll": ({"gateway": 'lease_tll = "30s"'}, "[gateway] lease_tll: unknown key (did you mean lease_ttl?)"),
    "store ulr": ({"store": 'ulr = "sqlite:///other.db"'}, "[store] ulr: unknown key (did you mean url?)"),
    "principal tool": (
        {"tail": PRINCIPAL + 'tool = ["charge_card"]\n'},
        "[[principals]] #1 (bot) tool: unknown key (did you mean tools?)",
    ),
    "principal role": (
        {"tail": PRINCIPAL + 'role = ["operator"]\n'},
        "[[principals]] #1 (bot) role: unknown key (did you mean roles?)",
    ),
    "unknown section": (
        {"tail": '[serve]\nlisten = "127.0.0.1:1"\n'},
        "[serve]: unknown section (did you mean server?",
    ),
    "unknown tls key": (
        {"tail": '[server.tls]\ncert_file = "/etc/hostname"\nkey_file = "/etc/hostname"\nca_file = "x"\n'},
        "[server.tls] ca_file: unknown key (did you mean client_ca_file?)",
    ),
    "bad duration": ({"gateway": 'recheck_min = "soon"'}, "[gateway] recheck_min: 'soon' is not a duration"),
    # A key with two forms: one phrase naming both, none of pydantic's validator names.
    "window neither duration nor auto": (
        {"tail": 'consistency_window = "soon"'},
        "[tools.charge_card] consistency_window: 'soon' is not a duration (e.g. '2s', '500ms', '1h30m') or 'auto'",
    ),
    # An adapter's own table: its path once, as in every other table.
    "adapter key": (
        {"adapter": 'api_bse = "http://127.0.0.1:9"'},
        "[adapters.stripe] api_bse: unknown key (did you mean api_base?)",
    ),
    "unknown role": ({"tail": PRINCIPAL + 'roles = ["admin"]\n'}, "[[principals]] #1 (bot) roles[0]: 'admin'"),
}


@pytest.mark.parametrize("case", list(TYPOS), ids=list(TYPOS))
def test_every_typo_is_refused_with_the_key_named(tmp_path: Path, case: str, forks: CliForks) -> None:
    parts, expected = TYPOS[case]
    config = write(tmp_path, base_toml(tmp_path, **parts))
    run = run_cli if case == next(iter(TYPOS)) else functools.partial(forked, forks)
    for command in ("check", "serve"):
        line = one_line_failure(run(command, "--config", str(config)), expected)
        assert line.startswith("effectgate: effectgate.toml: ")
        assert not re.search(r"function-|literal\[|adapters\.\w+\.\w", line), line


def test_a_refused_start_is_an_error_record_in_the_json_log(tmp_path: Path) -> None:
    config = write(tmp_path, base_toml(tmp_path, gateway='lease_tll = "30s"'))
    done = run_cli("--log-format", "json", "serve", "--config", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (record,) = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    assert record["severity_text"] == "ERROR" and record["severity_number"] == 17
    assert "[gateway] lease_tll: unknown key" in record["body"]


def _broken(tmp_path: Path, case: str) -> tuple[list[str], tuple[str, ...], dict[str, str]]:
    """(arguments, needles of the error line, environment) of one start-up failure."""
    ok = base_toml(tmp_path)
    if case == "missing config file":
        return ["serve", "--config", str(tmp_path / "nope.toml")], ("nope.toml", "No such file"), {}
    if case == "mysql":
        text = ok.replace(f"sqlite:///{tmp_path}/eg.db", "mysql://root@127.0.0.1/eg")
        return ["serve", "--config", str(write(tmp_path, text))], ("[store] url", "mysql"), {}
    if case == "missing tls files":
        text = base_toml(tmp_path, tail='[server.tls]\ncert_file = "/nonexistent/tls.crt"\nkey_file = "/x/tls.key"\n')
        return ["serve", "--config", str(write(tmp_path, text))], ("[server.tls] cert_file", "/nonexistent/tls.crt"), {}
    if case == "tls not pem":
        text = base_toml(tmp_path, tail=f'[server.tls]\ncert_file = "{tmp_path}/eg.toml"\nkey_file = "/etc/hostname"\n')
        (tmp_path / "eg.toml").write_text("not a certificate")
        return ["serve", "--config", str(write(tmp_path, text))], ("[server.tls] cert_file, key_file", "PEM"), {}
    if case == "postgres unreachable":
        port = nowhere()  # held: nobody listens there
        url = f"postgresql://eg:hunter2secret@127.0.0.1:{port}/eg?connect_timeout=2"
        text = ok.replace(f"sqlite:///{tmp_path}/eg.db", url)
        # `serve` waits for an unreachable store unless told to fail fast (tests/test_store_outage.py).
        return ["serve", "--config", str(write(tmp_path, text)), "--fail-fast"], ("[store]", f"127.0.0.1:{port}"), {}
    if case == "log level":
        return ["--log-level", "verbose", "serve", "--config", str(write(tmp_path, ok))], ("--log-level",), {}
    if case == "adapter timeout":
        text = ok.replace("timeout = 5", 'timeout = "abc"')
        return ["serve", "--config", str(write(tmp_path, text))], ("[adapters.stripe]", "timeout"), {}
    if case == "unset secret":
        text = ok.replace(API_KEY_ENV, "EFFECTGATE_TEST_UNSET_VARIABLE")
        return ["serve", "--config", str(write(tmp_path, text))], ("[adapters.stripe]", "EFFECTGATE_TEST_UNSET"), {}
    if case == "not toml":
        return ["serve", "--config", str(write(tmp_path, ok + "\n[server\n"))], ("not valid TOML",), {}
    if case == "plaintext principals":
        text = base_toml(tmp_path, tail=PRINCIPAL).replace("127.0.0.1:0", "0.0.0.0:0")
        return ["serve", "--config", str(write(tmp_path, text))], ("[server] listen", "TLS", "allow_plaintext"), {}
    raise AssertionError(case)


BROKEN = [
    "missing config file",
    "mysql",
    "missing tls files",
    "tls not pem",
    "postgres unreachable",
    "log level",
    "adapter timeout",
    "unset secret",
    "not toml",
    "plaintext principals",
]


@pytest.mark.parametrize("case", BROKEN)
def test_every_startup_failure_is_one_line_and_exit_2(tmp_path: Path, case: str, forks: CliForks) -> None:
    args, needles, env = _broken(tmp_path, case)
    done = forked(forks, *args, env=env)
    one_line_failure(done, *needles)
    assert "hunter2secret" not in done.stderr + done.stdout  # a database password is never printed
    if args[0] == "serve" and case not in ("log level",):
        # `check` says the same, without serving.
        one_line_failure(forked(forks, "check", *[a for a in args[1:] if a != "--fail-fast"], env=env), *needles)


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    config = write(tmp_path, base_toml(tmp_path).replace("timeout = 5", 'timeout = "abc"'))
    done = run_cli("--debug", "serve", "--config", str(config))
    assert done.returncode == 2 and "Traceback" in done.stderr


def _serving(target: str) -> bool:
    with grpc.insecure_channel(target) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


async def test_a_second_gateway_on_a_used_port_exits_2_and_the_first_keeps_serving(tmp_path: Path) -> None:
    first = GatewayProcess(write(tmp_path, base_toml(tmp_path), "first.toml"))
    try:
        port = await first.ready()
        # Another config, another store, the same port: the split brain of SO_REUSEPORT.
        other = tmp_path / "other"
        other.mkdir()
        text = base_toml(other).replace("127.0.0.1:0", f"127.0.0.1:{port}")
        done = await asyncio.to_thread(run_cli, "serve", "--config", str(write(other, text, "second.toml")))
        one_line_failure(done, f"cannot listen on 127.0.0.1:{port}", "in use")
        assert first.proc.poll() is None
        assert await asyncio.to_thread(_serving, first.target)
    finally:
        await first.stop()


def test_a_port_held_by_another_program_exits_2(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        text = base_toml(tmp_path).replace("127.0.0.1:0", f"127.0.0.1:{port}")
        done = run_cli("serve", "--config", str(write(tmp_path, text)))
        one_line_failure(done, f"cannot listen on 127.0.0.1:{port}", "in use")


async def test_allow_plaintext_starts_with_a_warning(tmp_path: Path) -> None:
    text = base_toml(tmp_path, server="allow_plaintext = true", tail=PRINCIPAL).replace("127.0.0.1:0", "0.0.0.0:0")
    process = GatewayProcess(write(tmp_path, text))
    try:
        await process.ready()
        assert any("PLAINTEXT" in line and "allow_plaintext" in line for line in process.output), process.output
    finally:
        await process.stop()


def test_check_passes_on_a_good_config_without_serving(tmp_path: Path) -> None:
    config = write(tmp_path, base_toml(tmp_path, tail=PRINCIPAL))
    done = run_cli("check", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "OK" in done.stdout and "1 principal(s)" in done.stdout
    assert (tmp_path / "eg.db").exists()  # the store was opened (and closed)


def _spawn_workers(config: Path, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "effectgate.gateway", "--log-level", "WARNING", "serve", "--config", str(config),
         "--workers", str(count)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


def _children(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


def _state(pid: str) -> str:
    status = Path(f"/proc/{pid}/status")
    lines = status.read_text().splitlines() if status.exists() else []
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("State:")), "gone")


def _running(pid: str) -> bool:
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


@pytest.mark.timeout(240)
async def test_workers_share_one_port_on_purpose_and_nobody_else_can_join(tmp_path: Path, sim: StripeSimulator) -> None:
    text = base_toml(tmp_path).replace("http://127.0.0.1:9", sim.base_url)
    config = write(tmp_path, text)
    parent = _spawn_workers(config, 2)
    try:
        assert parent.stdout is not None
        ready = await asyncio.wait_for(asyncio.to_thread(parent.stdout.readline), 90)
        found = re.search(r"serving on port (\d+) \(2 workers\)", ready)
        assert found, ready
        port = int(found.group(1))
        workers = _children(parent.pid)
        assert len(workers) == 2
        # Fresh connections land on either worker; every one is served from the one store.
        for index in range(6):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                done = await EffectGatewayStub(channel).Execute(charge(index), timeout=30)
                assert done.action.state == pb.EFFECT_STATE_CONFIRMED
        assert len([e for e in sim.ledger if e["kind"] == "payment_intent"]) == 6
        # A plain gateway (another store) cannot join, nor can another --workers parent.
        other = tmp_path / "other"
        other.mkdir()
        intruder = write(other, base_toml(other).replace("127.0.0.1:0", f"127.0.0.1:{port}"))
        one_line_failure(await asyncio.to_thread(run_cli, "serve", "--config", str(intruder)), "in use")
        one_line_failure(
            await asyncio.to_thread(run_cli, "serve", "--config", str(intruder), "--workers", "2"),
            "another `effectgate serve --workers` holds it",
        )
        parent.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(parent.wait, 60) == 0
        assert not [pid for pid in workers if _running(pid)]
        # A parent killed outright leaves no worker behind either (they watch it).
        parent = _spawn_workers(config, 2)
        assert parent.stdout is not None
        assert "serving on port" in await asyncio.wait_for(asyncio.to_thread(parent.stdout.readline), 90)
        workers = _children(parent.pid)
        parent.kill()
        await asyncio.to_thread(parent.wait, 10)
        loop = asyncio.get_running_loop()
        # Each worker notices within a second and then stops gracefully (shutdown_grace 10 s); a
        # failure says what is left.
        end = loop.time() + 60
        while alive := [pid for pid in workers if _running(pid)]:
            states = {pid: _state(pid) for pid in alive}
            assert loop.time() < end, f"workers outlived their parent: {states}"
            await asyncio.sleep(0.2)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)


def _serve_briefly(config: Path) -> str:
    """`serve` at INFO until it is ready, then SIGTERM; everything it printed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "effectgate.gateway", "--log-level", "DEBUG", "serve", "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    lines: list[str] = []
    try:
        for line in process.stdout:
            lines.append(line)
            if "serving on port" in line:
                process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, "".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    return "".join(lines)


@pytest.mark.postgres
async def test_a_postgres_password_is_never_printed(tmp_path: Path, pg_admin_dsn: str) -> None:
    name, dsn = await pg.create_database(pg_admin_dsn)
    try:
        # The test server trusts loopback, so the password is accepted and ignored.
        url = dsn.replace("postgresql://postgres@", "postgresql://postgres:hunter2secret@")
        config = write(tmp_path, base_toml(tmp_path).replace(f"sqlite:///{tmp_path}/eg.db", url))
        checked = await asyncio.to_thread(run_cli, "--log-level", "DEBUG", "check", "--config", str(config))
        assert checked.returncode == 0, checked.stderr
        assert "postgres:***@" in checked.stdout
        served = await asyncio.to_thread(_serve_briefly, config)
        assert "postgres:***@" in served
        assert "hunter2secret" not in checked.stdout + checked.stderr + served
    finally:
        await pg.drop_database(pg_admin_dsn, name)


def _unreachable_postgres_url() -> str:
    return f"postgresql://eg:hunter2secret@127.0.0.1:{nowhere()}/eg?connect_timeout=2"  # held: nobody listens there


@pytest.mark.parametrize("workers", [0, 2])
def test_an_unreachable_store_and_a_taken_port_is_one_line_and_exit_2(tmp_path: Path, workers: int) -> None:
    """Waiting for the store holds the port: a taken one fails the same way as without the wait."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        text = base_toml(tmp_path).replace("127.0.0.1:0", f"127.0.0.1:{port}")
        text = text.replace(f"sqlite:///{tmp_path}/eg.db", _unreachable_postgres_url())
        args = ["serve", "--config", str(write(tmp_path, text))] + (["--workers", str(workers)] if workers else [])
        done = run_cli(*args)
        one_line_failure(done, f"cannot listen on 127.0.0.1:{port}", "in use")
        assert "hunter2secret" not in done.stderr + done.stdout


def test_ctrl_c_while_waiting_for_the_store_says_so_and_exits_130(tmp_path: Path) -> None:
    text = base_toml(tmp_path).replace(f"sqlite:///{tmp_path}/eg.db", _unreachable_postgres_url())
    child = subprocess.Popen(
        [sys.executable, "-m", "effectgate.gateway", "serve", "--config", str(write(tmp_path, text))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stderr is not None
        for line in child.stderr:  # the wait has begun once it says so
            if "waiting" in line:
                break
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "stopped while waiting for the store" in stderr
