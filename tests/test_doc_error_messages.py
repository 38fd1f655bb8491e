"""Every gateway error line the docs quote is the gateway's own: each case below provokes one
start-up failure in a real `effectgate check` (or `serve`) process, and every quote in the docs
(the start-up error table, and any inline code that starts with `effectgate: `) must be found in
one of the real lines, `…` standing for any text. A case no quote uses fails too, so the table
and the cases stay one list. The `check` cases run as forks of one process that loaded the
command line once (tests/cli_forks.py); the `serve` cases, which reach the listener, and one
`check` case run as `python -m effectgate.gateway` processes of their own."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cli_forks import CliForks

ROOT = Path(__file__).resolve().parent.parent
TABLE = re.compile(r"<!-- startup-errors -->\n(.*?)<!-- /startup-errors -->", re.S)
INLINE = re.compile(r"`(effectgate: [^`]+)`")
ADAPTER = '[adapters.stripe]\napi_base = "http://127.0.0.1:9"\napi_key_env = "STRIPE_API_KEY"\n'
TOOL = '[tools.charge_card]\nadapter = "stripe"\n'
BASE = ADAPTER + TOOL
DIGEST = "04c0640f7450894700e902676917cbb0b82a50a12161f41e756ad3c541b4ad4d"
# The docs' example port. The busy-port cases run on a port this test holds (never a fixed one:
# another suite on the machine, or `effectgate check` probing its default port in a test beside
# this one, may hold or free 50051 at any moment), and their lines are read with it as 50051.
DOCUMENTED_PORT = 50051


@dataclass(frozen=True)
class Case:
    config: str
    argv: tuple[str, ...] = ("check", "--config", "effectgate.toml")
    env: dict[str, str | None] = field(default_factory=dict)


def principal(name: str) -> str:
    return f'[[principals]]\nname = "{name}"\ntenant = "acme"\ntoken_sha256 = "{DIGEST}"\n'


CASES = {
    "typo": Case('[gateway]\nlease_tll = "30s"\n' + BASE),
    "section": Case("[serve]\nx = 1\n" + BASE),
    "duration": Case('[gateway]\nrecheck_min = "soon"\n' + BASE),
    "two forms": Case(ADAPTER + TOOL + 'consistency_window = "soon"\n'),
    "no file": Case(BASE, argv=("check", "--config", "/etc/effectgate.toml")),
    "toml": Case("[gateway\n" + BASE),
    "scheme": Case('[store]\nurl = "mysql://db/effectgate"\n' + BASE),
    "tls file": Case(
        '[server.tls]\ncert_file = "/etc/effectgate/tls.crt"\nkey_file = "/etc/effectgate/tls.key"\n' + BASE
    ),
    "plaintext": Case('[server]\nlisten = "0.0.0.0:50051"\n' + principal("bot") + BASE),
    "dev mode": Case('[server]\nlisten = "0.0.0.0:50051"\n' + BASE),
    "same token": Case(principal("bot") + principal("bob") + BASE),
    "adapter table": Case(ADAPTER + '[tools.charge_card]\nadapter = "strip"\n'),
    "secret": Case(BASE, env={"STRIPE_API_KEY": None}),
    "adapter setting": Case(ADAPTER + 'timeout = "fast"\n' + TOOL),
    "adapter kind": Case('[adapters.acme]\nx = 1\n[tools.charge_card]\nadapter = "acme"\n'),
    "database": Case('[store]\nurl = "postgresql://effectgate:secret@127.0.0.1:9/effectgate"\n' + BASE),
    "port": Case('[server]\nlisten = "127.0.0.1:{busy}"\n' + BASE, argv=("serve", "--config", "effectgate.toml")),
    "metrics port": Case(  # gRPC on a socket of its own: only the metrics port can be the one in use
        '[server]\nlisten = "unix:{folder}/grpc.sock"\n[telemetry]\nprometheus_listen = "127.0.0.1:{busy}"\n' + BASE,
        argv=("serve", "--config", "effectgate.toml"),
    ),
    "webhook port": Case(  # the same: only the webhook listener's port can be the one in use
        '[server]\nlisten = "unix:{folder}/grpc.sock"\n[webhooks]\nlisten = "127.0.0.1:{busy}"\n' + BASE,
        argv=("serve", "--config", "effectgate.toml"),
    ),
    # TEST-NET-1 (RFC 5737) is no host's address: the bind is refused at once, nothing is sent.
    "not this host": Case('[webhooks]\nlisten = "192.0.2.1:0"\n' + BASE),
    "one port twice": Case(  # refused as the config is read: the port is never bound
        '[server]\nlisten = "127.0.0.1:{busy}"\n[telemetry]\nprometheus_listen = "127.0.0.1:{busy}"\n' + BASE,
        argv=("serve", "--config", "effectgate.toml"),
    ),
    "socket file": Case(  # the config file itself lies at the socket's path
        '[server]\nlisten = "unix:{folder}/effectgate.toml"\n' + BASE, argv=("serve", "--config", "effectgate.toml")
    ),
    "socket directory": Case(
        '[server]\nlisten = "unix:{folder}/missing/grpc.sock"\n' + BASE, argv=("serve", "--config", "effectgate.toml")
    ),
    "workers socket": Case(  # check --workers: serve --workers' refusal, before anything is bound
        '[server]\nlisten = "unix:{folder}/grpc.sock"\n' + BASE,
        argv=("check", "--config", "effectgate.toml", "--workers", "2"),
    ),
    "option": Case(BASE, argv=("--log-level", "verbose", "check", "--config", "effectgate.toml")),
}


def quotes() -> list[str]:
    found: list[str] = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        for table in TABLE.findall(text):
            for row in table.splitlines()[2:]:
                first = row.split("|")[1].strip()
                assert first.startswith("`") and first.endswith("`"), f"{path.name}: {row}"
                found.append(first.strip("`"))
        found += INLINE.findall(text)
    return sorted(set(found))


def says(line: str, quote: str) -> bool:
    """`quote` is in `line`, `…` standing for any text."""
    position = 0
    for piece in (p.strip() for p in quote.split("…")):
        position = line.find(piece, position)
        if position < 0:
            return False
        position += len(piece)
    return True


@contextmanager
def busy_port() -> Iterator[int]:
    """A loopback port this test listens on for as long as the block runs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


# A `check` case run as a process of its own, not a fork: the wiring of the whole command.
OWN_PROCESS = "typo"


def prepared(name: str, case: Case, tmp_path: Path, busy: int = 0) -> tuple[Path, dict[str, str]]:
    folder = tmp_path / name.replace(" ", "-")
    folder.mkdir()
    (folder / "effectgate.toml").write_text(case.config.replace("{folder}", str(folder)).replace("{busy}", str(busy)))
    env = {**os.environ, "STRIPE_API_KEY": "sk_test_docs"}
    for key, value in case.env.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return folder, env


def last_line(name: str, returncode: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert returncode == 2 and lines, f"{name}: exit {returncode}\n{err}"
    return lines[-1]


async def real_line(name: str, case: Case, tmp_path: Path, busy: int) -> str:
    folder, env = prepared(name, case, tmp_path, busy)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", *case.argv,
        cwd=folder, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 90)
    finally:
        if proc.returncode is None:  # it started instead of refusing: never leave it serving
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    line = last_line(name, proc.returncode, err.decode())
    return line.replace(f"127.0.0.1:{busy}:", f"127.0.0.1:{DOCUMENTED_PORT}:").replace(
        f"127.0.0.1:{busy} (", f"127.0.0.1:{DOCUMENTED_PORT} ("
    )


def forked_line(forks: CliForks, name: str, case: Case, tmp_path: Path) -> str:
    folder, env = prepared(name, case, tmp_path)
    done = forks.run(*case.argv, env=env, cwd=folder)
    return last_line(name, done.returncode, done.stderr)


def own_process(name: str, case: Case) -> bool:
    return "serve" in case.argv or name == OWN_PROCESS


@pytest.fixture(scope="module")
def real_lines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    assert not Path("/etc/effectgate.toml").exists()
    tmp_path = tmp_path_factory.mktemp("errors")

    async def provoke(busy: int) -> list[str]:
        own = (real_line(n, c, tmp_path, busy) for n, c in CASES.items() if own_process(n, c))
        return list(await asyncio.gather(*own))

    forks = CliForks()
    try:
        forked = {n: forked_line(forks, n, c, tmp_path) for n, c in CASES.items() if not own_process(n, c)}
    finally:
        forks.close()
    with busy_port() as busy:
        own = dict(zip([n for n, c in CASES.items() if own_process(n, c)], asyncio.run(provoke(busy)), strict=True))
    return {name: {**forked, **own}[name] for name in CASES}


QUOTES = quotes()


def test_the_docs_quote_the_start_up_errors() -> None:
    assert len(QUOTES) >= len(CASES), QUOTES


@pytest.mark.parametrize("quote", QUOTES)
def test_every_quoted_error_is_the_gateways_own(quote: str, real_lines: dict[str, str]) -> None:
    matches = [name for name, line in real_lines.items() if says(line, quote)]
    assert matches, f"no real error line contains the quote:\n  {quote}\nreal lines:\n  " + "\n  ".join(
        real_lines.values()
    )


def test_every_case_is_quoted(real_lines: dict[str, str]) -> None:
    unquoted = {name: line for name, line in real_lines.items() if not any(says(line, q) for q in QUOTES)}
    assert not unquoted, f"provoked but quoted nowhere in the docs: {unquoted}"
