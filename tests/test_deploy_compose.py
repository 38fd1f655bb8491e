"""deploy/compose.yaml, read as YAML (no Docker engine here): every published port on 127.0.0.1,
a stop grace longer than the gateway's shutdown_grace, PostgreSQL with a health check that the
gateway waits for (after the migration), restart policies, Jaeger v2 behind a current collector."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from effectgate.gateway.config import parse_duration

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
COMPOSE: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
GATEWAY = SERVICES["effectgate"]


def seconds(text: str) -> float:
    """A compose duration (`30s`, `1m30s`) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    assert parts and "".join(n + u for n, u in parts) == text, text
    return sum(float(n) * units[u] for n, u in parts)


def test_every_published_port_is_on_loopback() -> None:
    published = [str(port) for service in SERVICES.values() for port in service.get("ports", [])]
    assert "127.0.0.1:50051:50051" in GATEWAY["ports"]
    assert published and all(port.startswith("127.0.0.1:") for port in published), published


def test_the_stop_grace_outlasts_the_gateways_shutdown_grace() -> None:
    config = tomllib.loads((DEPLOY / "effectgate.toml").read_text())
    grace = parse_duration(config["server"]["shutdown_grace"])
    assert seconds(GATEWAY["stop_grace_period"]) > grace >= 10


def test_the_gateway_waits_for_a_healthy_postgresql_and_the_migration() -> None:
    postgres = SERVICES["postgres"]
    assert postgres["image"].startswith("postgres:") and "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert GATEWAY["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert GATEWAY["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    migrate = SERVICES["migrate"]
    assert migrate["command"][-3:] == ["migrate", "--config", "/etc/effectgate/effectgate.toml"]
    assert migrate["depends_on"]["postgres"] == {"condition": "service_healthy"}
    # The store URL names no credentials: both read PGUSER / PGPASSWORD from the environment.
    url = tomllib.loads((DEPLOY / "effectgate.toml").read_text())["store"]["url"]
    assert url.startswith("postgresql://postgres:") and "@" not in url
    for service in (GATEWAY, migrate):
        assert {"PGUSER", "PGPASSWORD"} <= set(service["environment"])


def test_long_running_services_restart_and_the_migration_does_not() -> None:
    for name, service in SERVICES.items():
        expected = "no" if name == "migrate" else "unless-stopped"
        assert service.get("restart") == expected, name


def test_traces_go_to_jaeger_v2_through_a_current_collector() -> None:
    image, tag = SERVICES["jaeger"]["image"].split(":")
    assert image == "jaegertracing/jaeger" and int(tag.split(".")[0]) >= 2
    collector, version = SERVICES["otel-collector"]["image"].split(":")
    assert collector.startswith("otel/opentelemetry-collector") and tuple(map(int, version.split("."))) >= (0, 140)
    assert "environment" not in SERVICES["jaeger"]  # v1's COLLECTOR_OTLP_ENABLED and friends are gone
    collector_config = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())
    exporters = collector_config["exporters"]
    assert exporters["otlp/jaeger"]["endpoint"] == "jaeger:4317"


def test_the_gateways_logs_reach_the_collector_in_a_pipeline_of_their_own() -> None:
    pipelines = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())["service"]["pipelines"]
    assert pipelines["logs"]["receivers"] == ["otlp"] and pipelines["logs"]["exporters"]
    environments = [s.get("environment") or {} for s in SERVICES.values()]
    assert any(env.get("OTEL_LOGS_EXPORTER") == "otlp" for env in environments if isinstance(env, dict))
