"""What a `serve` process is told and what it says: its options, the lines supervisors and tests
read on stdout (the ports), the one-line failure of a start-up (serve.py, workers.py), and what
`serve --workers` refuses and claims (the name of its claim on a port, which a refusal names)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from effectgate.gateway.config import Config, ConfigError, unix_path
from effectgate.gateway.observability import json_line, mask_url

READY = "effectgate serving on port"
READY_AT = "effectgate serving on"  # then a Unix socket's address: `effectgate serving on unix:/run/eg.sock`
PROBES = "effectgate probes on port"
METRICS = "effectgate metrics on port"  # after the ready line: where /metrics, /livez, /readyz answer
WEBHOOKS = "effectgate webhooks on port"  # after the ready line, with [webhooks]: the listener's port


class StartupFailed(Exception):
    """Start-up failed; the message is the one line to print."""


@dataclass(frozen=True)
class ServeOptions:
    config_path: str
    workers: int = 0
    worker_port: int = 0
    log_level: str = "INFO"
    log_format: str = "text"
    fail_fast: bool = False
    worker_webhook_port: int = 0  # a worker's [webhooks] port, held by its parent (0: none)


def announce(text: str, log_format: str, **fields: object) -> None:
    """A line supervisors and tests read on stdout (the port): JSON under `--log-format json`."""
    if log_format == "json":
        text = json_line(text, "INFO", "effectgate.server", time.time(), dict(fields))
    # One write with its newline: stdout may be unbuffered (PYTHONUNBUFFERED), where print() writes
    # the text and the newline apart, and a log line sharing the pipe could land in between.
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


# Who holds a port a `serve --workers` pool claimed, in a refusal.
POOL_HOLDS = "another `effectgate serve --workers` holds it"


def claim_name(port: int) -> str:
    """The abstract Unix socket a `serve --workers` parent binds to claim `port` (Linux: exclusive
    per host, released when the process dies)."""
    return f"\0effectgate-port-{port}"


def pool_claims(port: str) -> bool:
    """A `serve --workers` pool claims `port` now (read from /proc/net/unix, nothing bound)."""
    if not port.isdigit() or port == "0":
        return False
    name = "@" + claim_name(int(port))[1:]
    try:
        with open("/proc/net/unix") as table:  # its last field is the path, "@" for an abstract name
            return any(line.split()[-1] == name for line in table)
    except OSError:
        return False


def refuse_workers(config: Config, count: int) -> None:
    """What `serve --workers COUNT` refuses before it binds anything, in the words `check
    --workers COUNT` prints too (a ConfigError)."""
    if count < 1:
        raise ConfigError("--workers: at least 1")
    if unix_path(config.listen):  # workers share a TCP port (SO_REUSEPORT); a socket file cannot be
        raise ConfigError(f"--workers: needs a HOST:PORT [server] listen, not the Unix socket {config.listen}")


def store_failure(config: Config, exc: BaseException) -> StartupFailed:
    return StartupFailed(f"{config.source}: [store] {mask_url(config.store_url)}: {exc}")
