"""The simulated gateway's config and tools: the same `parse_config` as `effectgate serve`."""

from __future__ import annotations

import functools

from effectgate.adapters.base import Capabilities
from effectgate.gateway.config import Config, parse_config
from effectgate.testing.sim.provider import SimAdapter, SimProvider
from tests.sim.webhooks import HookedAdapter

# Unix time of the simulation's start: a whole number of limit windows, so one run is one window.
WINDOW = 30 * 86400
EPOCH = float(WINDOW * 656)
BUDGET = 2000  # the `pay` tool's spend per window (its amounts are 100..500)
MAX_EFFECTS = 8  # the `pay` tool's effects per window

# name: (dedups on key, has a read API, consistency window, keeps processing)
TOOLS = {
    "pay": (True, True, 4.0, 8.0),  # a payment API with idempotency keys and a read API
    "send": (False, True, 3.0, 6.0),  # a generic API without keys, searchable by metadata
    "approve": (True, True, 2.0, 5.0),  # a payment that needs an operator's approval
    "blind": (True, False, 2.0, 5.0),  # keys but no read API: a lost answer stays UNKNOWN
    "once": (True, True, 3.0, 6.0),  # `unique = "scope"`: one action per business object
}
APPROVAL_TTL = 40.0


# The tools a world has without its `unique = "scope"` tool (`--off once`: the world as it was).
UNSCOPED = tuple(name for name in TOOLS if name != "once")


def adapters(provider: SimProvider, names: tuple[str, ...] = tuple(TOOLS)) -> dict[str, SimAdapter]:
    made: dict[str, SimAdapter] = {}
    for name in names:
        dedups, readable, window, keeps = TOOLS[name]
        caps = Capabilities(
            dedups_on_key=dedups,
            key_retention=86400.0 if dedups else None,
            consistency_window=window,
            has_read_api=readable,
            keeps_processing=keeps,
        )
        adapter = HookedAdapter(provider, caps)
        adapter.name = name  # its webhooks' route and signing secret
        made[name] = adapter
    return made


@functools.cache  # one Config for every seed: it is immutable, and parsing it costs more than a run
def config(names: tuple[str, ...] = tuple(TOOLS)) -> Config:
    tools: dict[str, dict[str, object]] = {
        name: {"adapter": name, "deadline": "20s", "attempt_timeout": "3s", "max_attempts": 3} for name in names
    }
    tools["pay"]["limits"] = {"budget": {"usd": BUDGET}, "max_effects": MAX_EFFECTS, "window": f"{WINDOW}s"}
    tools["pay"]["bypass"] = "operator"
    if "once" in tools:
        tools["once"]["limits"] = {"unique": "scope"}
    tools["approve"].update(approval="required", approval_ttl=f"{APPROVAL_TTL:g}s")
    return parse_config(
        {
            "server": {"listen": "127.0.0.1:0"},
            "store": {"url": "sqlite:///unused.db"},
            "gateway": {
                "reconcile_interval": "3s",
                "recheck_min": "1s",
                "recheck_max": "20s",
                "lease_ttl": "15s",
                "health_interval": "5s",
            },
            "adapters": {name: {} for name in names},
            "tools": tools,
        },
        source="tests.sim",
    )
