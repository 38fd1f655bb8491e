"""Limits' hooks: a metric per denial, a metric and an audit line per circuit breaker change and
per limit grant (logger `effectgate.audit`), and the gauges of each window cap's use and what is
left. Labels: the tenant and the tool (both from the config) and fixed reasons, states, limit
names and the currencies the config names."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from effectgate.gateway.model import LimitGrant

audit = logging.getLogger("effectgate.audit")
meter = metrics.get_meter("effectgate")

_denials = meter.create_counter(
    "effectgate.limits.denials", unit="{call}", description="New actions refused by a limit, by tool and reason"
)
_breaker_changes = meter.create_counter(
    "effectgate.breaker.changes", unit="{change}", description="Circuit breaker changes, by tool and new state"
)


_grants = meter.create_counter(
    "effectgate.limits.grants", unit="{grant}", description="Limit grants given by operators"
)
# (tenant, tool, limit, currency) -> (used, left) of the current window: the last reading of the
# background job (background/watchers.py); replaced whole at each reading.
USAGE: dict[tuple[str, str, str, str], tuple[int, int]] = {}


def usage_read(readings: Mapping[tuple[str, str, str, str], tuple[int, int]]) -> None:
    USAGE.clear()
    USAGE.update(readings)


def _observe(index: int) -> Any:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(figures[index], {"tenant": t, "tool": tool, "limit": limit, "currency": currency})
            for (t, tool, limit, currency), figures in list(USAGE.items())
        ]

    return observe


meter.create_observable_gauge(
    "effectgate.limits.used",
    [_observe(0)],
    unit="1",
    description="Use of each window cap (effects, or spend in the amount's unit) in the current window",
)
meter.create_observable_gauge(
    "effectgate.limits.left",
    [_observe(1)],
    unit="1",
    description="What is left of each window cap in the current window",
)


def granted(grant: LimitGrant) -> None:
    """An operator let one action past its tool's limits (a LimitGrant)."""
    _grants.add(1)
    audit.info(
        "grant_limit %s by %s",
        grant.action_id,
        grant.principal,
        extra={
            "event": "operator_act",
            "act": "grant_limit",
            "operator": grant.principal,
            "note": grant.note,
            "tenant": grant.tenant,
            "action_id": grant.action_id,
        },
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
