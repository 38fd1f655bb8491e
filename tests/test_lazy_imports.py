"""A gateway process loads what its config uses and no more: `effectgate check` never loads the
server, `serve` loads the webhook listener's HTTP stack only with [webhooks] and cel-python only
with an approval rule, and neither loads the operator commands' renderers (rich, yaml) or shell
completion; an operator command (`effectgate actions`) loads neither the gateway's config, model
and call metrics nor pydantic. Each is a fifth of a second of CPU at every start; a regression is an assertion here,
not a slower suite. Each case runs in a fresh interpreter (sys.modules is per process)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import API_KEY_ENV

# Loaded by no `check`, and by no `serve` whose config does not ask for them.
NEVER_FOR_CHECK = (
    "effectgate.gateway.runtime.server",
    "effectgate.gateway.runtime.serve",
    "effectgate.gateway.rpc",
    "effectgate.gateway.intake",
    "uvicorn",
    "celpy",
    "lark",
    "asyncpg",
    "opentelemetry.sdk",
    "argcomplete",
    "effectgate.client.cli.commands",
)
NOT_FOR_THIS_SERVE = ("effectgate.gateway.intake", "uvicorn", "celpy", "lark", "asyncpg", "opentelemetry.sdk")
# What only an HTTP adapter (or the Stripe SDK, which loads httpx) needs, and the operator
# commands' renderers (httpx's own command line loads rich too).
NOT_WITHOUT_HTTP = ("httpx", "rich", "yaml", "effectgate.client.cli.render")
# What only the gateway's own commands use: an operator command is a gRPC client.
NEVER_FOR_OPERATOR = (
    "effectgate.gateway.config",
    "effectgate.gateway.model",
    "effectgate.gateway.observability.calls",
    "effectgate.gateway.observability.metrics",
    "effectgate.gateway.observability.audit_log",
    "effectgate.adapters.settings",
    "pydantic",
)
WATCHED = sorted({*NEVER_FOR_CHECK, *NOT_FOR_THIS_SERVE, *NOT_WITHOUT_HTTP, *NEVER_FOR_OPERATOR})
MARK = "LOADED:"

CLI = """
import json, sys
from effectgate.gateway.runtime.cli import main
code = main([sys.argv[2], "--config", sys.argv[1]])
print("{mark}" + json.dumps(sorted(m for m in {watched} if m in sys.modules)), code)
"""
SERVE = """
import asyncio, json, sys
from effectgate.gateway.config import load_config
from effectgate.gateway.runtime import cli, serve
from effectgate.gateway.runtime.server import Gateway

async def main():
    gateway = await Gateway.start(load_config(sys.argv[1]))
    await gateway.stop()

asyncio.run(main())
print("{mark}" + json.dumps(sorted(m for m in {watched} if m in sys.modules)), 0)
"""


def config(tmp_path: Path, *, stripe: bool = True, tail: str = "") -> Path:
    text = f'[server]\nlisten = "127.0.0.1:0"\nshutdown_grace = "1s"\n[store]\nurl = "sqlite:///{tmp_path}/eg.db"\n'
    if stripe:
        text += (
            f'[adapters.stripe]\napi_base = "http://127.0.0.1:9"\napi_key_env = "{API_KEY_ENV}"\n'
            '[tools.charge_card]\nadapter = "stripe"\n'
        )
    path = tmp_path / "effectgate.toml"
    path.write_text(text + tail)
    return path


OPERATOR = """
import json, sys
from effectgate.gateway.runtime.cli import main
code = main(["actions", "--target", sys.argv[1]])
print("{mark}" + json.dumps(sorted(m for m in {watched} if m in sys.modules)), code)
"""


def loaded(script: str, path: Path | str, command: str = "check", status: int = 0) -> set[str]:
    """The watched modules a fresh interpreter running `script` on the config `path` loaded."""
    code = script.format(mark=MARK, watched=tuple(WATCHED))
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), command], capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith(MARK))
    names, code_seen = line.removeprefix(MARK).rsplit(" ", 1)
    assert code_seen == str(status), done.stdout + done.stderr
    return set(json.loads(names))


def test_check_loads_neither_the_server_nor_what_the_config_does_not_use(tmp_path: Path) -> None:
    assert loaded(CLI, config(tmp_path)) & set(NEVER_FOR_CHECK) == set()


def test_check_of_a_config_without_http_adapters_loads_no_http_client_nor_renderer(tmp_path: Path) -> None:
    assert loaded(CLI, config(tmp_path, stripe=False)) & {*NEVER_FOR_CHECK, *NOT_WITHOUT_HTTP} == set()


def test_a_refused_serve_never_loads_the_server(tmp_path: Path) -> None:
    path = config(tmp_path)
    path.write_text(path.read_text().replace(API_KEY_ENV, "EFFECTGATE_TEST_KEY_NOBODY_SET"))
    found = loaded(CLI, path, "serve", status=2)  # the adapter's secret is missing: exit 2
    assert "effectgate.gateway.runtime.serve" in found  # the watch sees what loads
    assert "effectgate.gateway.runtime.server" not in found


def test_serve_loads_no_webhook_listener_nor_cel_it_was_not_asked_for(tmp_path: Path) -> None:
    found = loaded(SERVE, config(tmp_path))
    assert found & {*NOT_FOR_THIS_SERVE, "argcomplete", "effectgate.client.cli.commands"} == set()


@pytest.mark.parametrize(
    ("tail", "needed"),
    [
        ('[webhooks]\nlisten = "127.0.0.1:0"\n', "uvicorn"),
        ('[tools.charge_card.limits]\nrequire_approval_when = ["amount > 100"]\n', "celpy"),
    ],
)
def test_what_the_config_asks_for_is_loaded(tmp_path: Path, tail: str, needed: str) -> None:
    # The other side of the tests above: they would pass vacuously if the watch missed loads.
    assert needed in loaded(SERVE, config(tmp_path, tail=tail))


def test_an_operator_command_loads_none_of_the_gateways_own_modules() -> None:
    with socket.socket() as held:  # bound, never listening: the command's connection is refused
        held.bind(("127.0.0.1", 0))
        found = loaded(OPERATOR, f"127.0.0.1:{held.getsockname()[1]}", status=1)
    assert found & set(NEVER_FOR_OPERATOR) == set()
    assert "effectgate.client.cli.render" in found  # the watch sees what loads


def test_the_lazy_names_of_the_packages_are_the_modules_own() -> None:
    # What `effectgate.adapters` and `effectgate.gateway.observability` load on first use is the
    # object their modules define (a wrong entry in a lazy table is an error at first use only).
    from effectgate import adapters
    from effectgate.adapters import settings
    from effectgate.gateway import observability
    from effectgate.gateway.observability import calls, metrics

    assert adapters.AdapterSettings is settings.AdapterSettings
    assert adapters.parse_settings is settings.parse_settings
    for name in adapters.__all__:
        assert getattr(adapters, name) is not None
    for name in observability.__all__:
        assert getattr(observability, name) is not None
    assert observability.RpcMetrics is calls.RpcMetrics and observability.calls is calls
    assert observability.Backlog is metrics.Backlog


def test_the_client_packages_names_load_on_first_use_and_are_the_modules_own() -> None:
    # The gateway reads `effectgate.client.money_text` and `.states`; importing them must not load
    # the clients (a twentieth of a second of every gateway's start).
    code = (
        "import sys, effectgate.client.money_text, effectgate.client.states\n"
        "print(sorted(m for m in ('effectgate.client.client', 'effectgate.client.sync', 'effectgate.client.retry')"
        " if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    import effectgate.client as client
    from effectgate.client import client as clients_module
    from effectgate.client import context, errors, retry, states, sync

    homes = {"client": clients_module, "sync": sync, "retry": retry, "states": states, "context": context}
    for name in client.__all__:
        module = homes.get(client._HOME[name], errors)
        assert getattr(client, name) is getattr(module, name), name
    assert sorted(client._HOME) == sorted(client.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = client.Nope
