"""The `_meta` contract: how an MCP host hands effectgate the run context of a tool call.

The model writes a tool call's `arguments`; the host (the agent runtime) writes its `_meta`, which
the model never sees. effectgate keys an action on the run context, so it takes that context only
from `_meta`, under one reverse-DNS key:

    "_meta": {
      "dev.effectgate/run": {
        "run_id": "run-7f3a",          # required: one user request, kept across resumes
        "step_id": "charge-deposit",   # required: the logical step, stable across re-plans
        "scope": "order:1093",         # optional: the business object the effect is about
        "parent_run_id": "",           # optional, tracing only
        "agent": "billing"             # optional, tracing only
      },
      "traceparent": "00-…-…-01"       # optional W3C trace context
    }

Nothing here is ever derived from the arguments: two calls with the same run context are the same
action whatever the model wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from mcp_types import RequestParamsMeta

META_KEY = "dev.effectgate/run"
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_FIELDS = ("run_id", "step_id", "scope", "parent_run_id", "agent")
_MAX_LEN = 512


class MissingRunContext(ValueError):
    """The call carries no usable run context; the message says what the host must send."""


@dataclass(frozen=True)
class CallContext:
    run_id: str
    step_id: str
    scope: str = ""
    parent_run_id: str = ""
    agent: str = ""

    def to_meta(self) -> dict[str, Any]:
        """The `_meta` entry for this context (what a host sends)."""
        return {META_KEY: {k: v for k in _FIELDS if (v := getattr(self, k))}}


def run_meta(
    run_id: str, step_id: str, *, scope: str = "", parent_run_id: str = "", agent: str = "", traceparent: str = ""
) -> RequestParamsMeta:
    """A complete `_meta` object for `tools/call` (hosts written in Python can use this)."""
    meta = CallContext(run_id, step_id, scope, parent_run_id, agent).to_meta()
    if traceparent:
        meta[TRACEPARENT] = traceparent
    return cast(RequestParamsMeta, meta)


def parse_call_context(meta: Mapping[str, Any] | None) -> CallContext:
    """The run context of a call, or MissingRunContext naming the contract."""
    entry = (meta or {}).get(META_KEY)
    if entry is None:
        raise MissingRunContext(
            f"no run context: the MCP host must send `_meta[{META_KEY!r}]` with run_id and step_id "
            "(see docs/agents.md); effectgate never derives an action key from the arguments"
        )
    if not isinstance(entry, Mapping):
        raise MissingRunContext(f"`_meta[{META_KEY!r}]` must be an object with run_id and step_id")
    values: dict[str, str] = {}
    for name in _FIELDS:
        raw = entry.get(name, "")
        if not isinstance(raw, str) or len(raw) > _MAX_LEN:
            raise MissingRunContext(f"`_meta[{META_KEY!r}].{name}` must be a string of at most {_MAX_LEN} characters")
        values[name] = raw.strip()
    missing = [n for n in ("run_id", "step_id") if not values[n]]
    if missing:
        raise MissingRunContext(f"`_meta[{META_KEY!r}]` lacks {' and '.join(missing)}")
    return CallContext(**values)


def trace_carrier(meta: Mapping[str, Any] | None) -> dict[str, str]:
    """The W3C trace headers carried in `_meta`, for an OpenTelemetry propagator."""
    found = {}
    for key in (TRACEPARENT, TRACESTATE):
        value = (meta or {}).get(key)
        if isinstance(value, str) and value:
            found[key] = value
    return found
