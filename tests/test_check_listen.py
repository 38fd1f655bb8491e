"""`effectgate check` looks at `[server] listen` without taking it: a free Unix path or port is OK,
a stale socket is one serve would take over, an address held now (a live gateway, another process
on the socket, a listening port) is a WARNING (exit 0: it may be free when serve starts), and what
serve would refuse for good (a file at the path, a missing directory) is serve's own line, exit 2.
Every process is real; every wait is for an exit or a printed line; nothing is made or changed."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from effectgate.gateway.config import ConfigError, parse_config
from effectgate_lab.chaos.config_writer import dump_config, write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools
from tests.serve_child import ServeChild
from tests.test_unix_listen import charge, serving_on, socket_doc
from tests.test_unix_socket_door import snapshot, there


async def check(tmp_path: Path, sim: StripeSimulator, address: str) -> tuple[int, list[str], list[str]]:
    """`effectgate check` of a config listening on `address`: its exit status, stdout, stderr."""
    config = tmp_path / "check.toml"
    write_config(config_doc(f"sqlite:///{tmp_path}/eg.db", listen=address, **stripe_tools(sim.base_url)), config)
    child = await ServeChild(["check", "--config", str(config)]).start()
    code = await child.exit_code()
    assert not any("Traceback" in line for line in child.stderr), child.transcript()
    return code, child.stdout, child.stderr


def listen_line(stdout: list[str]) -> str:
    lines = [line for line in stdout if line.startswith("listen: ")]
    assert len(lines) == 1, stdout
    return lines[0]


async def test_a_free_unix_path_is_ok_and_nothing_is_made(tmp_path: Path, sim: StripeSimulator) -> None:
    path = tmp_path / "grpc.sock"
    code, out, err = await check(tmp_path, sim, f"unix:{path}")
    assert code == 0, err
    assert (
        listen_line(out) == f"listen: unix:{path}: OK: nothing at {path} yet: serve makes the socket there (mode 0660)"
    )
    assert there(path, f"{path}.lock") == []


async def test_a_socket_nobody_answers_on_would_be_taken_over(tmp_path: Path, sim: StripeSimulator) -> None:
    path = tmp_path / "grpc.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))  # closed without listening: the file stays, nobody answers
    before = snapshot(path)
    code, out, err = await check(tmp_path, sim, f"unix:{path}")
    assert code == 0, err
    assert listen_line(out) == (
        f"listen: unix:{path}: OK: {path} is a socket nobody answers on (left by a gateway that stopped): "
        "serve takes it over"
    )
    assert snapshot(path) == before and there(f"{path}.lock") == []


async def test_a_path_a_live_gateway_serves_on_is_in_use(tmp_path: Path, sim: StripeSimulator) -> None:
    path = tmp_path / "grpc.sock"
    address = f"unix:{path}"
    gateway = await ServeChild.for_config(socket_doc(tmp_path, sim, address), tmp_path / "eg.toml").start()
    try:
        await serving_on(gateway, address)
        before = snapshot(path), snapshot(Path(f"{path}.lock"))
        code, out, err = await check(tmp_path, sim, address)
        assert code == 0, err
        assert listen_line(out) == (
            f"listen: WARNING: cannot listen on {address}: the address is in use (another gateway serves there); "
            "serve exits with this line while it is held"
        )
        assert (snapshot(path), snapshot(Path(f"{path}.lock"))) == before
        assert (await charge(address, "run-check-1")).startswith("pi_")  # it serves on, undisturbed
    finally:
        assert await gateway.stop() == 0, gateway.transcript()


async def test_a_socket_another_process_answers_on_is_in_use(tmp_path: Path, sim: StripeSimulator) -> None:
    path = tmp_path / "grpc.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as theirs:
        theirs.bind(str(path))
        theirs.listen(8)
        code, out, err = await check(tmp_path, sim, f"unix:{path}")
    assert code == 0, err
    assert listen_line(out) == (
        f"listen: WARNING: cannot listen on unix:{path}: the address is in use (a process answers on {path}, "
        "without a gateway's lock); serve exits with this line while it is held"
    )
    assert there(f"{path}.lock") == []


async def test_a_regular_file_at_the_path_is_serves_refusal(tmp_path: Path, sim: StripeSimulator) -> None:
    path = tmp_path / "grpc.sock"
    path.write_text("the user's notes\n")
    before = snapshot(path)
    address = f"unix:{path}"
    code, out, err = await check(tmp_path, sim, address)
    assert code == 2 and out == [], (out, err)
    said = [line for line in err if line.startswith("effectgate:")]
    assert said == [f"effectgate: cannot listen on {address}: {path} is a regular file, not a socket; left as it is"]
    # serve says the very same line
    serve = ServeChild.for_config(socket_doc(tmp_path, sim, address), tmp_path / "eg.toml")
    assert await (await serve.start()).exit_code() == 2, serve.transcript()
    assert [line for line in serve.stderr if line.startswith("effectgate:")] == said
    assert snapshot(path) == before and there(f"{path}.lock") == []


async def test_a_missing_directory_is_named(tmp_path: Path, sim: StripeSimulator) -> None:
    directory = tmp_path / "missing"
    address = f"unix:{directory}/grpc.sock"
    code, out, err = await check(tmp_path, sim, address)
    assert code == 2 and out == [], (out, err)
    assert [line for line in err if line.startswith("effectgate:")] == [
        f"effectgate: cannot listen on {address}: the directory {directory} does not exist"
    ]
    assert not directory.exists()


async def test_a_port_is_ok_until_a_socket_listens_on_it(tmp_path: Path, sim: StripeSimulator) -> None:
    # Bound without listening, with SO_REUSEADDR: the port is this test's (no one else may take
    # it) and still bindable by a probe that asks for SO_REUSEADDR too, as check's does.
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        code, out, err = await check(tmp_path, sim, address)
        assert code == 0, err
        assert listen_line(out) == f"listen: {address}: OK: the port can be bound now"

        holder.listen(8)
        code, out, err = await check(tmp_path, sim, address)
        assert code == 0, err
        assert listen_line(out) == (
            f"listen: WARNING: cannot listen on {address}: Address already in use; "
            "serve exits with this line while it is held"
        )
        with socket.socket() as caller:
            caller.connect(("127.0.0.1", holder.getsockname()[1]))  # still the holder's


# -- the gateway's other addresses: the metrics port and the webhook listener -----------------

METRICS_SETTING = "[telemetry] prometheus_listen"
WEBHOOKS_SETTING = "[webhooks] listen"


def ports_doc(
    tmp_path: Path, sim: StripeSimulator, metrics: str, webhooks: str, listen: str = "127.0.0.1:0"
) -> dict[str, Any]:
    """A config whose every address is the test's: `listen`, the metrics port, the webhooks'."""
    doc = socket_doc(tmp_path, sim, listen)
    doc["telemetry"] = {"prometheus_listen": metrics}
    doc["webhooks"] = {"listen": webhooks}
    return doc


async def check_doc(tmp_path: Path, doc: dict[str, Any]) -> tuple[int, list[str], list[str]]:
    config = tmp_path / "check.toml"
    config.write_text(dump_config(doc))  # not validated here: some are configs the child refuses
    child = await ServeChild(["check", "--config", str(config)]).start()
    code = await child.exit_code()
    assert not any("Traceback" in line for line in child.stderr), child.transcript()
    return code, child.stdout, child.stderr


def port_lines(stdout: list[str]) -> list[str]:
    return [line for line in stdout if line.startswith(("listen: ", "metrics: ", "webhooks: "))]


async def serve_refuses(tmp_path: Path, doc: dict[str, Any]) -> list[str]:
    """`serve`'s exit 2 on `doc`: its `effectgate:` lines."""
    config = tmp_path / "eg.toml"
    config.write_text(dump_config(doc))
    serve = await ServeChild(["serve", "--config", str(config)]).start()
    code = await serve.exit_code()
    if code != 2:
        await serve.stop()
    assert code == 2, serve.transcript()
    return [line for line in serve.stderr if line.startswith("effectgate:")]


def held_port() -> socket.socket:
    """A port of the test's own: bound (SO_REUSEADDR) without listening, so a probe may bind it too."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    return holder


async def test_each_address_serve_binds_has_its_line(tmp_path: Path, sim: StripeSimulator) -> None:
    with held_port() as metrics, held_port() as hooks:
        metrics_at = f"127.0.0.1:{metrics.getsockname()[1]}"
        hooks_at = f"127.0.0.1:{hooks.getsockname()[1]}"
        code, out, err = await check_doc(tmp_path, ports_doc(tmp_path, sim, metrics_at, hooks_at))
        assert code == 0, err
        assert port_lines(out) == [
            "listen: 127.0.0.1:0: OK: port 0: serve takes any free port",
            f"metrics: {metrics_at}: OK: the port can be bound now",
            f"webhooks: {hooks_at}: OK: the port can be bound now",
        ]


async def test_without_them_only_the_listen_line(tmp_path: Path, sim: StripeSimulator) -> None:
    code, out, err = await check(tmp_path, sim, "127.0.0.1:0")
    assert code == 0, err
    assert port_lines(out) == ["listen: 127.0.0.1:0: OK: port 0: serve takes any free port"]


async def test_a_held_metrics_port_is_a_warning_with_serves_line(tmp_path: Path, sim: StripeSimulator) -> None:
    with held_port() as metrics:
        metrics.listen(8)
        metrics_at = f"127.0.0.1:{metrics.getsockname()[1]}"
        doc = ports_doc(tmp_path, sim, metrics_at, "127.0.0.1:0")
        code, out, err = await check_doc(tmp_path, doc)
        assert code == 0, err
        refusal = f"cannot listen on {metrics_at} ({METRICS_SETTING}): Address already in use"
        assert port_lines(out)[1:] == [
            f"metrics: WARNING: {refusal}; serve exits with this line while it is held",
            "webhooks: 127.0.0.1:0: OK: port 0: serve takes any free port",
        ]
        assert any(line.endswith(refusal) and "WARNING" in line for line in err), err  # logged too
        assert await serve_refuses(tmp_path, doc) == [f"effectgate: {refusal}"]


async def test_a_held_webhook_port_is_a_warning_with_serves_line(tmp_path: Path, sim: StripeSimulator) -> None:
    with held_port() as hooks:
        hooks.listen(8)
        hooks_at = f"127.0.0.1:{hooks.getsockname()[1]}"
        doc = ports_doc(tmp_path, sim, "127.0.0.1:0", hooks_at)
        code, out, err = await check_doc(tmp_path, doc)
        assert code == 0, err
        refusal = f"cannot listen on {hooks_at} ({WEBHOOKS_SETTING}): Address already in use"
        assert port_lines(out)[2] == f"webhooks: WARNING: {refusal}; serve exits with this line while it is held"
        assert any(line.endswith(refusal) and "WARNING" in line for line in err), err
        assert await serve_refuses(tmp_path, doc) == [f"effectgate: {refusal}"]


async def test_an_address_not_of_this_host_is_serves_refusal(tmp_path: Path, sim: StripeSimulator) -> None:
    # 192.0.2.1 (TEST-NET-1, RFC 5737) is no host's address: the bind is refused at once, nothing is sent.
    for name, doc in (
        (METRICS_SETTING, ports_doc(tmp_path, sim, "192.0.2.1:0", "127.0.0.1:0")),
        (WEBHOOKS_SETTING, ports_doc(tmp_path, sim, "127.0.0.1:0", "192.0.2.1:0")),
    ):
        code, out, err = await check_doc(tmp_path, doc)
        assert code == 2 and out == [], (out, err)
        said = [line for line in err if line.startswith("effectgate:")]
        assert said == [f"effectgate: cannot listen on 192.0.2.1:0 ({name}): Cannot assign requested address"]
        assert await serve_refuses(tmp_path, doc) == said


async def test_two_listeners_on_one_port_are_refused_by_name(tmp_path: Path, sim: StripeSimulator) -> None:
    # The port is the test's; neither check nor serve binds it: the config is refused first.
    with held_port() as mine:
        at = f"127.0.0.1:{mine.getsockname()[1]}"
        cases = (
            (ports_doc(tmp_path, sim, at, "127.0.0.1:0", listen=at), METRICS_SETTING, "[server] listen"),
            (ports_doc(tmp_path, sim, "127.0.0.1:0", at, listen=at), WEBHOOKS_SETTING, "[server] listen"),
            (ports_doc(tmp_path, sim, at, f"0.0.0.0:{mine.getsockname()[1]}"), WEBHOOKS_SETTING, METRICS_SETTING),
        )
        for doc, second, first in cases:
            code, out, err = await check_doc(tmp_path, doc)
            assert code == 2 and out == [], (out, err)
            said = [line for line in err if line.startswith("effectgate:")]
            there = doc["webhooks"]["listen"] if second == WEBHOOKS_SETTING else at
            assert said == [
                f"effectgate: check.toml: {second}: {there} is the port of {first} ({at}): "
                "each listener needs a port of its own"
            ], said
            assert [line.replace("eg.toml", "check.toml") for line in await serve_refuses(tmp_path, doc)] == said


@pytest.mark.parametrize(
    ("one", "other", "shared"),
    [
        ("127.0.0.1:7", "127.0.0.1:7", True),
        ("localhost:7", "127.0.0.1:7", True),
        ("[::1]:7", "localhost:7", True),
        ("0.0.0.0:7", "10.1.2.3:7", True),
        ("[::]:7", "127.0.0.1:7", True),
        ("127.0.0.1:7", "127.0.0.1:8", False),
        ("127.0.0.2:7", "127.0.0.1:7", False),
        ("127.0.0.1:0", "127.0.0.1:0", False),
    ],
)
def test_which_addresses_share_a_port(one: str, other: str, shared: bool) -> None:
    doc: dict[str, Any] = {"server": {"listen": "unix:/run/eg.sock"}, "telemetry": {"prometheus_listen": one}}
    doc["webhooks"] = {"listen": other}
    if shared:
        with pytest.raises(
            ConfigError, match=r"\[webhooks\] listen: .* is the port of \[telemetry\] prometheus_listen"
        ):
            parse_config(doc)
    else:
        parse_config(doc)


# -- `check --workers N`: what `serve --workers N` refuses, in its words ------------------------


async def refused_line(argv: list[str]) -> str:
    """The one `effectgate:` line of a child that exits 2."""
    child = await ServeChild(argv).start()
    code = await child.exit_code()
    if code != 2:
        await child.stop()
    assert code == 2, child.transcript()
    lines = [line for line in child.stderr if line.startswith("effectgate:")]
    assert len(lines) == 1, child.transcript()
    return lines[0]


@pytest.mark.parametrize(
    ("listen", "workers", "said"),
    [
        ("unix", "2", "--workers: needs a HOST:PORT [server] listen, not the Unix socket unix:"),
        ("127.0.0.1:0", "-1", "--workers: at least 1"),
    ],
)
async def test_check_workers_refuses_what_serve_workers_refuses_in_the_same_line(
    tmp_path: Path, sim: StripeSimulator, listen: str, workers: str, said: str
) -> None:
    config = tmp_path / "eg.toml"
    write_config(socket_doc(tmp_path, sim, f"unix:{tmp_path}/grpc.sock" if listen == "unix" else listen), config)
    checked = await refused_line(["check", "--config", str(config), "--workers", workers])
    served = await refused_line(["serve", "--config", str(config), "--workers", workers])
    assert checked == served
    assert checked.startswith(f"effectgate: {said}"), checked
    assert not (tmp_path / "grpc.sock").exists()


async def test_check_workers_on_a_port_says_the_pool_may_start(tmp_path: Path, sim: StripeSimulator) -> None:
    config = tmp_path / "eg.toml"
    write_config(socket_doc(tmp_path, sim, "127.0.0.1:0"), config)
    child = await ServeChild(["check", "--config", str(config), "--workers", "3"]).start()
    assert await child.exit_code() == 0, child.transcript()
    assert "workers: 3: OK: serve --workers 3 shares 127.0.0.1:0 between 3 processes" in child.stdout
