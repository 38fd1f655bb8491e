"""The optional `[telemetry]` config section.

Everything here has an `OTEL_*` environment equivalent, and the environment wins: operators who
already configure their OpenTelemetry SDKs by environment keep doing so. With neither an
`OTEL_EXPORTER_OTLP_*ENDPOINT` nor `otlp_endpoint`, nor a Prometheus listener, the gateway installs
no SDK at all and telemetry stays the API's no-ops.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from effectgate.gateway.config.durations import Duration

# The setting's name, as the lines about its address say it.
PROMETHEUS_LISTEN = "[telemetry] prometheus_listen"


class TelemetryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # resource `service.name` unless OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES set one.
    service_name: str = "effectgate"
    # OTLP collector (OTEL_EXPORTER_OTLP_ENDPOINT wins); "" = no OTLP export.
    otlp_endpoint: str = ""
    # OTEL_EXPORTER_OTLP_PROTOCOL wins.
    otlp_protocol: Literal["grpc", "http/protobuf"] = "http/protobuf"
    # The gateway's log records over OTLP too (same endpoint and protocol, `/v1/logs` on HTTP);
    # OTEL_LOGS_EXPORTER (otlp | none) wins. Off by default.
    otlp_logs: bool = False
    # Parent-based trace-id ratio sampling; OTEL_TRACES_SAMPLER wins. None = always on.
    sample_ratio: float | None = Field(default=None, ge=0.0, le=1.0)
    # "host:port" of a Prometheus text endpoint (/metrics); "" = none. Port 0 picks a free one.
    prometheus_listen: str = ""
    # How often the UNKNOWN backlog is read from the store (seconds or "15s").
    backlog_interval: Duration = 15.0
    # Stripe SDK / httpx / httpcore INFO lines (one per request, with URLs): off by default.
    provider_sdk_logs: bool = False

    @field_validator("backlog_interval")
    @classmethod
    def _positive(cls, seconds: float) -> float:
        if seconds <= 0:
            raise ValueError("must be positive")
        return seconds

    @field_validator("prometheus_listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        if value and not re.fullmatch(r"\[?[^\s\[\]]*\]?:\d{1,5}", value):
            raise ValueError(f"{value!r} is not host:port")
        return value

    @property
    def prometheus_address(self) -> tuple[str, int] | None:
        if not self.prometheus_listen:
            return None
        host, _, port = self.prometheus_listen.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)
