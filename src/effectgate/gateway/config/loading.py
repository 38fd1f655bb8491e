"""The config file read, validated and cross-checked: the rules that span tables, each message
starting with its key path."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from effectgate.adapters.base import ConfigError
from effectgate.gateway.config.errors import describe, did_you_mean
from effectgate.gateway.config.provider import WEBHOOKS_LISTEN
from effectgate.gateway.config.schema import Config, host_port, is_loopback, unix_path
from effectgate.gateway.config.telemetry import PROMETHEUS_LISTEN

# Hosts that bind every address of the host: they share a port with any other host.
_EVERY_ADDRESS = ("", "0.0.0.0", "::", "*")


def _cross_checks(config: Config) -> list[str]:
    """Rules that span tables; each message starts with its key path."""
    problems: list[str] = []
    if config.dev_mode and not is_loopback(config.listen):
        problems.append(
            "[server] listen: with no [[principals]] the gateway runs in development mode and binds to "
            "loopback only; configure principals to listen on other addresses"
        )
    if config.plaintext_exposed and not config.server.allow_plaintext:
        problems.append(
            f"[server] listen: {config.listen} is not loopback and [[principals]] send bearer tokens: "
            "configure [server.tls] (or set server.allow_plaintext = true behind a TLS-terminating proxy)"
        )
    adapters = sorted(config.adapters)
    for tool in config.tools.values():
        where = f"[tools.{tool.name}]"
        if tool.adapter not in config.adapters:
            problems.append(
                f"{where} adapter: {tool.adapter!r} is not an [adapters.*] table"
                f"{did_you_mean(tool.adapter, adapters)} (configured: {', '.join(adapters) or 'none'})"
            )
        if tool.approval_ttl is not None and tool.approval_ttl <= 0:
            problems.append(f"{where} approval_ttl: must be a positive duration")
        if tool.attempt_timeout >= config.lease_ttl:
            problems.append(f"{where} attempt_timeout: must be shorter than [gateway] lease_ttl")
    seen: dict[str, str] = {}
    for index, principal in enumerate(config.principals, 1):
        where = f"[[principals]] #{index} ({principal.name})"
        if principal.token_sha256 in seen:
            problems.append(f"{where} token_sha256: the same token digest as principal {seen[principal.token_sha256]}")
        seen.setdefault(principal.token_sha256, principal.name)
        for name in sorted(principal.tools - set(config.tools)):
            problems.append(
                f"{where} tools: {name!r} is not a [tools.*] table{did_you_mean(name, sorted(config.tools))}"
            )
    problems.extend(_notify_checks(config))
    problems.extend(_port_checks(config))
    return problems


def _hosts(host: str) -> set[str] | None:
    """The addresses a listener on `host` takes (None: every address of the host)."""
    host = host.strip("[]").lower()
    if host in _EVERY_ADDRESS:
        return None
    return {"localhost", "127.0.0.1", "::1"} if host == "localhost" else {host}


def _same_port(one: str, other: str) -> bool:
    """Two HOST:PORTs one bind excludes the other from (port 0: each gets a free port of its own)."""
    host, _, port = one.rpartition(":")
    other_host, _, other_port = other.rpartition(":")
    if int(port) == 0 or int(port) != int(other_port):
        return False
    mine, theirs = _hosts(host), _hosts(other_host)
    return mine is None or theirs is None or bool(mine & theirs)


def _port_checks(config: Config) -> list[str]:
    """Two of the gateway's own listeners on one port: serve's second bind would fail with the
    line of a port another program holds (or, for the webhooks, after the gRPC port was taken)."""
    ports = [] if unix_path(config.listen) else [("[server] listen", config.listen)]
    if config.telemetry.prometheus_address is not None:
        ports.append((PROMETHEUS_LISTEN, host_port(*config.telemetry.prometheus_address)))
    if config.webhooks is not None:
        ports.append((WEBHOOKS_LISTEN, config.webhooks.listen))
    return [
        f"{name}: {address} is the port of {other_name} ({other}): each listener needs a port of its own"
        for index, (name, address) in enumerate(ports)
        for other_name, other in ports[:index]
        if _same_port(address, other)
    ]


def _notify_checks(config: Config) -> list[str]:
    problems: list[str] = []
    if config.notify and config.gateway.notify_interval <= 0:
        problems.append("[gateway] notify_interval: must be a positive duration")
    tools = sorted(config.tools)
    tenants = sorted({p.tenant for p in config.principals} or {"dev"})
    names: set[str] = set()
    for index, sink in enumerate(config.notify, 1):
        where = f"[[notify]] #{index} ({sink.name})"
        if sink.name in names:
            problems.append(f"{where} name: another [[notify]] is named {sink.name!r}")
        names.add(sink.name)
        problems.extend(f"{where} {problem}" for problem in sink.problems())
        for name in sorted(sink.tools - set(tools)):
            problems.append(f"{where} tools: {name!r} is not a [tools.*] table{did_you_mean(name, tools)}")
        for tenant in sorted(sink.tenants - set(tenants)):
            problems.append(
                f"{where} tenants: {tenant!r} is no principal's tenant{did_you_mean(tenant, tenants)}"
                f" (tenants: {', '.join(tenants)})"
            )
    return problems


def parse_config(doc: Mapping[str, Any], source: str = "effectgate.toml") -> Config:
    """Validates a parsed TOML document; a ConfigError names `source`, the key and what is allowed."""
    try:
        config = Config.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(f"{source}: " + "; ".join(describe(Config, doc, exc))) from None
    tools = {name: tool.model_copy(update={"name": name}) for name, tool in config.tools.items()}
    config = config.model_copy(update={"tools": tools})
    config._source = source
    problems = _cross_checks(config)
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return config


def load_config(path: str | Path) -> Config:
    source = Path(path).name
    try:
        with open(path, "rb") as handle:
            doc = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    return parse_config(doc, source)
