"""Limits' hooks: a metric per denial, and a metric and an audit line per circuit breaker change
(logger `effectgate.audit`). Labels: the tool (from the config) and fixed reasons and states."""

from __future__ import annotations

import logging

from opentelemetry import metrics

audit = logging.getLogger("effectgate.audit")
meter = metrics.get_meter("effectgate")

_denials = meter.create_counter(
    "effectgate.limits.denials", unit="{call}", description="New actions refused by a limit, by tool and reason"
)
_breaker_changes = meter.create_counter(
    "effectgate.breaker.changes", unit="{change}", description="Circuit breaker changes, by tool and new state"
)


def denied(tool: str, reason: str) -> None:
    _denials.add(1, {"tool": tool, "reason": reason})


def breaker_changed(tool: str, state: str, why: str) -> None:
    _breaker_changes.add(1, {"tool": tool, "state": state})
    audit.warning(
        "circuit breaker of %s %s: %s",
        tool,
        state,
        why,
        extra={"event": "breaker_changed", "tool": tool, "state": state},
    )
