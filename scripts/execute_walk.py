"""The stops a walk of one Execute makes through the gateway's code (issue 45's measure): the
modules of `effectgate.gateway` whose functions run while one Execute is served, in order,
background jobs left out; for a new action and for a replay, on an in-process gateway on SQLite.

    .venv/bin/python scripts/execute_walk.py [-v]

A stop is a module entered from another one (consecutive calls inside one module count once).
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from types import FrameType
from typing import Any

from effectgate.client import RunContext
from effectgate.testing import ScriptedAdapter, gateway
from effectgate.tools.v1 import tools_pb2

MARK = "/effectgate/gateway/"


def charge() -> tools_pb2.ChargeCard:
    return tools_pb2.ChargeCard(customer="cus_1", amount=1, currency="usd", payment_method="pm_card_visa")


async def walk(kind: str) -> list[str]:
    """The modules entered while one Execute (`new` or `replay`) is served, after a warm-up."""
    cards = ScriptedAdapter(time.time)
    async with gateway(adapters={"cards": cards}, store="sqlite", settings={"reconcile_interval": "1h"}) as gw:
        warm = RunContext(run_id="warm", step_id="s")
        for _ in range(2):  # the first call imports and caches; the second is a replay
            await gw.client.execute("cards", charge(), scope="invoice:1", context=warm)
        seen: list[str] = []

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call":
                name = frame.f_code.co_filename
                at = name.find(MARK)
                if at >= 0 and not name[at + len(MARK) :].startswith("background"):
                    seen.append(name[at + len(MARK) : -3])

        context = RunContext(run_id="walk" if kind == "new" else "warm", step_id="s")
        sys.setprofile(profile)
        try:
            await gw.client.execute("cards", charge(), scope="invoice:1", context=context)
        finally:
            sys.setprofile(None)
    return [m for i, m in enumerate(seen) if i == 0 or seen[i - 1] != m]


def main() -> None:
    for kind in ("new", "replay"):
        stops = asyncio.run(walk(kind))
        observed = collections.Counter(m for m in stops if m.startswith("observability"))
        print(
            f"{kind}: {len(stops)} stops, {len(set(stops))} distinct modules; observability entered "
            f"{sum(observed.values())} times in {len(observed)} modules {dict(observed)}"
        )
        if "-v" in sys.argv:
            print("  " + " > ".join(stops))


if __name__ == "__main__":
    main()
