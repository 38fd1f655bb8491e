"""`effectgate check` looks at `[server] listen` without taking it: a free Unix path or port is OK,
a stale socket is one serve would take over, an address held now (a live gateway, another process
on the socket, a listening port) is a WARNING (exit 0: it may be free when serve starts), and what
serve would refuse for good (a file at the path, a missing directory) is serve's own line, exit 2.
Every process is real; every wait is for an exit or a printed line; nothing is made or changed."""

from __future__ import annotations

import socket
from pathlib import Path

from effectgate_lab.chaos.config_writer import write_config
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
