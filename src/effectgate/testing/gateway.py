"""A real gateway in the test's own process: `async with gateway(...) as gw`.

It is the gateway `effectgate serve` runs (`Gateway.start`: the same services, protocol,
reconciler, readiness and graceful stop) on a grpc.aio server at 127.0.0.1, port 0, in
development mode (no principals: every caller is tenant `dev`), serving adapter *instances* the
test owns, a `MemoryStore` (or a SQLite file in a temporary directory) and optionally a
`FakeClock`. Agent code under test talks to it over gRPC, through `gw.client` or its own client
pointed at `gw.target`.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

from effectgate.adapters.base import Adapter
from effectgate.client import EffectGateClient
from effectgate.gateway.config import Config, parse_config
from effectgate.gateway.runtime import Gateway, GatewayObserver
from effectgate.gateway.store import Store
from effectgate.testing.clock import FakeClock
from effectgate.testing.store import MemoryStore

# A test gateway reacts quickly: the reconciler looks for due work every 0.1 s (real time), and
# an UNKNOWN action is re-checked from 0.2 s on (in the gateway's clock: virtual with a FakeClock).
TEST_SETTINGS: Mapping[str, Any] = {"reconcile_interval": "0.1s", "recheck_min": "0.2s"}


@dataclass
class InProcessGateway:
    """What `gateway(...)` yields: the address, a ready client, and the parts behind them."""

    # "127.0.0.1:PORT", for `EffectGateClient(gw.target)` or EFFECTGATE_TARGET.
    target: str
    # An async client on `target` (no token, plaintext), closed when the block ends.
    client: EffectGateClient
    # The running gateway (`server.protocol`, `server.reconciler`, `server.config`, …).
    server: Gateway
    # The store it serves: the `MemoryStore` by default (its `db` holds the rows and the faults).
    store: Store
    adapters: Mapping[str, Adapter]
    # The gateway's clock: the FakeClock given, or None for the wall clock.
    clock: FakeClock | None

    @property
    def config(self) -> Config:
        return self.server.config

    def connect(self, **options: Any) -> EffectGateClient:
        """Another async client on this gateway (e.g. `retry=True`, `timeout=2`); close it."""
        return _client(self.target, **options)


def _client(target: str, **options: Any) -> EffectGateClient:
    # Explicit plaintext and no token: the test's environment (EFFECTGATE_TLS_CA, …) does not leak in.
    return EffectGateClient(target, token="", tls=False, ca_file="", cert_file="", key_file="", **options)


def _config(
    adapters: Mapping[str, Adapter],
    tools: Mapping[str, Mapping[str, Any]] | None,
    store_url: str,
    settings: Mapping[str, Any] | None,
    shutdown_grace: float,
    tables: Mapping[str, Any] | None = None,
) -> Config:
    if tools is None:
        tools = {name: {"adapter": name} for name in adapters}
    return parse_config(
        {
            "server": {"listen": "127.0.0.1:0", "shutdown_grace": shutdown_grace},
            "store": {"url": store_url},
            "gateway": {**TEST_SETTINGS, **(settings or {})},
            # The tables only name the adapters (tools refer to them); the instances are served.
            "adapters": {name: {} for name in adapters},
            "tools": {name: dict(table) for name, table in tools.items()},
            **(tables or {}),
        },
        source="effectgate.testing.gateway",
    )


@asynccontextmanager
async def gateway(
    *,
    adapters: Mapping[str, Adapter],
    tools: Mapping[str, Mapping[str, Any]] | None = None,
    store: Literal["memory", "sqlite"] | Store = "memory",
    clock: FakeClock | None = None,
    settings: Mapping[str, Any] | None = None,
    shutdown_grace: float = 2.0,
    tables: Mapping[str, Any] | None = None,
    observer: GatewayObserver | None = None,
) -> AsyncIterator[InProcessGateway]:
    """Starts a gateway in this process and stops it (gracefully) when the block ends.

    - `adapters`: adapter instances by name (your own adapter, or a `ScriptedAdapter`);
    - `tools`: `[tools.NAME]` tables as in effectgate.toml, e.g.
      `{"charge_card": {"adapter": "payments", "consistency_window": "30s"}}`; by default one
      tool per adapter, named after it, with the default policies;
    - `store`: `"memory"` (a fresh `MemoryStore`), `"sqlite"` (a file in a temporary directory,
      deleted afterwards), or a `Store` instance, which the gateway opens and closes;
    - `clock`: a `FakeClock` the gateway reads and sleeps on (consistency windows and back-offs
      pass in virtual time). Start it at the wall clock, `FakeClock(time.time())`: the gateway
      turns a caller's gRPC deadline into a wall-clock time;
    - `settings`: `[gateway]` keys over the test defaults (`TEST_SETTINGS`);
    - `tables`: other top-level tables of effectgate.toml, e.g. `{"webhooks": {"listen":
      "127.0.0.1:0"}}` or `{"principals": [...]}` (then callers need a token, and `client` has
      none: make your own `EffectGateClient(gw.target, token=...)`);
    - `observer`: what the gateway's core reports to, instead of a new `GatewayObserver` (a
      subclass that records what it hears).

    The adapters are closed with the gateway, as `effectgate serve` closes its own.
    """
    if clock is not None and clock() < time.time() - 3600:
        raise ValueError(
            "the FakeClock is far behind the wall clock: start it with FakeClock(time.time()) "
            "(the gateway turns a caller's gRPC deadline into a wall-clock time)"
        )
    async with AsyncExitStack() as stack:
        # With a store instance the config's URL is never opened: the instance is served instead.
        instance: Store | None
        if isinstance(store, Store):
            url, instance = "sqlite:///unused.db", store
        elif store == "memory":
            url, instance = "sqlite:///unused.db", MemoryStore()
        elif store == "sqlite":
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="effectgate-"))
            url, instance = f"sqlite:///{folder}/effectgate.db", None
        else:
            raise ValueError(f"store must be 'memory', 'sqlite' or a Store instance, not {store!r}")
        config = _config(adapters, tools, url, settings, shutdown_grace, tables)
        background = None if clock is None else _Observing(clock)
        server = await Gateway.start(
            config, store=instance, adapters=adapters, clock=clock, background_clock=background, observer=observer
        )
        stack.push_async_callback(server.stop)
        target = f"127.0.0.1:{server.port}"
        client = _client(target)
        stack.push_async_callback(client.close)
        yield InProcessGateway(target, client, server, server.store, server.adapters, clock)


class _Observing:
    """The background jobs' view of a FakeClock: its time, but idle waits in real time.

    A FakeClock's sleep advances its time at once; the jobs' interval waits would then race the
    virtual time ahead of the calls under test (a caller's deadline would pass in a blink)."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock

    def __call__(self) -> float:
        return self._clock()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(min(max(seconds, 0.0), 0.5))
