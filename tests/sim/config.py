"""The simulated gateway's config and tools: the same `parse_config` as `effectgate serve`."""

from __future__ import annotations

import base64
import functools
import os

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


# The config a redeploy brings (tests/sim/reloads.py): the `pay` limits lowered, the `approve`
# tool's policy changed (its approvals given before no longer count), `send` retried less.
BUDGET_V2, MAX_EFFECTS_V2, APPROVAL_TTL_V2 = 1500, 6, 60.0


# The [[notify]] sink of a seed that has the deliverer (tests/sim/notices.py replaces the sink
# itself; its secret must still build). A fixed test secret, set for this process only.
NOTIFY_SECRET_ENV = "EFFECTGATE_SIM_NOTIFY_SECRET"
os.environ.setdefault(NOTIFY_SECRET_ENV, "whsec_" + base64.b64encode(b"the simulator's notify secret").decode())
NOTIFY = {
    "name": "sim",
    "kind": "webhook",
    "url": "http://127.0.0.1:9/never-called",
    "secret_env": NOTIFY_SECRET_ENV,
    "console_url": "http://127.0.0.1:9",
    "max_attempts": 1000,
    "backoff": "1s",
    "backoff_max": "8s",
}


@functools.cache  # one Config for every seed: it is immutable, and parsing it costs more than a run
def config(names: tuple[str, ...] = tuple(TOOLS), version: int = 1, notify: bool = False) -> Config:
    tools: dict[str, dict[str, object]] = {
        name: {"adapter": name, "deadline": "20s", "attempt_timeout": "3s", "max_attempts": 3} for name in names
    }
    budget, effects, ttl = (
        (BUDGET, MAX_EFFECTS, APPROVAL_TTL) if version == 1 else (BUDGET_V2, MAX_EFFECTS_V2, APPROVAL_TTL_V2)
    )
    tools["pay"]["limits"] = {"budget": {"usd": budget}, "max_effects": effects, "window": f"{WINDOW}s"}
    tools["pay"]["bypass"] = "operator"
    if "once" in tools:
        tools["once"]["limits"] = {"unique": "scope"}
    tools["approve"].update(approval="required", approval_ttl=f"{ttl:g}s")
    if version != 1:
        tools["send"].update(attempt_timeout="2s", max_attempts=2)
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
                "notify_interval": "2s",
            },
            "adapters": {name: {} for name in names},
            "tools": tools,
            **({"notify": [NOTIFY]} if notify else {}),
        },
        source="tests.sim",
    )
