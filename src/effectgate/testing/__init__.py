"""effectgate.testing: test your adapters and your agent code against a real gateway, in-process.

Shipped with the gateway (no pytest needed: it works from unittest, pytest or a script), like
`temporalio.testing` or httpx's `MockTransport`. docs/testing.md has complete examples.

- `gateway(adapters=..., tools=...)`: an async context manager running the real gateway on
  127.0.0.1 (port 0) over your adapter instances and a `MemoryStore` (or a SQLite file), and
  yielding an `InProcessGateway`: its `target` and a ready `effectgate.client` async `client`;
- `FakeClock`: virtual time; `await clock.sleep(s)` advances it at once, so a 30 s consistency
  window passes in milliseconds (give it to `gateway(clock=...)` and to your adapter);
- `ScriptedAdapter`: a provider model (effects, idempotency keys, read-after-write lag) whose
  answers can be scripted call by call: `None` (apply), `Lost()` (applied, answer lost),
  an exception (no effect), `Hang()` (blocks until released), or an `Observation` for verify;
- `MemoryStore` / `MemoryDatabase`: the Store contract in memory, with faults on demand
  (`db.down`, `db.read_only`, `db.fail_writes_after(n)`), shareable by several gateways;
- `Rig` / `rig()`: the effect protocol without gRPC, wired on the three above, for tests of the
  protocol's own rules (`command()` builds an Execute for the `CHARGE` payload).

Adapter authors also have the adapter conformance suite, `effectgate.adapters.testing`.
"""

from effectgate.testing.adapter import Effect, Hang, Lost, ScriptedAdapter
from effectgate.testing.clock import FakeClock
from effectgate.testing.gateway import InProcessGateway, gateway
from effectgate.testing.rig import CHARGE, Rig, command, rig
from effectgate.testing.store import MemoryDatabase, MemoryStore

__all__ = [
    "CHARGE",
    "Effect",
    "FakeClock",
    "Hang",
    "InProcessGateway",
    "Lost",
    "MemoryDatabase",
    "MemoryStore",
    "Rig",
    "ScriptedAdapter",
    "command",
    "gateway",
    "rig",
]
