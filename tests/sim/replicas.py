"""Simulated replicas: each built by `build_replica` (the production wiring) on the shared
in-memory store, with its own skewed wall clock and drifting monotonic clock, and its calls to the
store and the provider passing through a gate that can crash it.

A crash stops the process where it stands: every task of the replica that reaches its next store
or provider call waits there forever (a killed process runs nothing more; its in-memory work
between two calls has no effect outside). A restart is a new replica (a new owner) on the same
store.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from grpc_health.v1 import _async as health_aio

from effectgate.gateway.config import Config
from effectgate.gateway.runtime.replica import Replica, build_replica
from effectgate.testing.sim.provider import Hookable
from effectgate.testing.sim.store import SimStore
from tests.sim import config

if TYPE_CHECKING:
    from tests.sim.world import World


# A replica's chance, at each store or provider call, to stall there (longer than a lease).
STALL_ODDS = 0.01


class Gate:
    """A replica's way out (to the store, to the provider): counts its calls and crashes the
    replica at the n-th, before the call or after it returned."""

    def __init__(self, replica: SimReplica, what: str, faults: Any) -> None:
        self.replica = replica
        self.what = what
        self.faults = faults

    # Both run at every store and provider call, so they are written out flat (what `crossing`
    # and `maybe_stall` were, in the same order, with the same draws): a dead replica's task stops
    # here; the replica crashes at its n-th call, before it or after it returned; while the world
    # is faulty, the task may stall (`SimReplica.stall`), then the faults are drawn.

    async def enter(self, kind: str) -> None:
        r = self.replica
        world = r.world
        if r.dead:
            await _forever(world.frozen)
        r.calls += 1
        if r.crash_at is not None and r.calls >= r.crash_at and not r.crash_after:
            await r.crash_here(f"{self.what}.{kind}", "before")
        if world.faulty:
            if r.stalls.random() < STALL_ODDS:
                await r.stall(f"before {self.what}.{kind}")
            if self.faults is not None and world.faulty:
                await self.faults.enter(kind)
        if r.dead:  # killed while it stood still (a stall, a slow store): no call
            await _forever(world.frozen)

    async def leave(self, kind: str) -> None:
        r = self.replica
        world = r.world
        if r.dead:
            await _forever(world.frozen)
        if r.crash_at is not None and r.calls >= r.crash_at and r.crash_after:
            await r.crash_here(f"{self.what}.{kind}", "after")
        if world.faulty and r.stalls.random() < STALL_ODDS:
            await r.stall(f"after {self.what}.{kind}")
        if r.dead:
            await _forever(world.frozen)
        if self.faults is not None and world.faulty:
            await self.faults.leave(kind)
        if kind == "write" and self.what == "store":
            world.after_write()


class SimReplica:
    def __init__(self, world: World, number: int, crash_at: int | None, crash_after: bool) -> None:
        self.world = world
        self.name = f"r{number}"
        rng = random.Random(f"replica:{world.seed}:{number}")
        # Its host's clocks: the wall clock off by up to 0.2 s, the monotonic clock drifting by up
        # to 50 ppm from its own arbitrary origin.
        self.skew = (rng.random() * 2 - 1) * 0.2
        self.drift = (rng.random() * 2 - 1) * 50e-6
        self.mono0 = rng.random() * 1e5
        self.rate = 1 + self.drift
        self.loop = world.loop
        self.calls = 0
        self.stalls = random.Random(f"stalls:{world.seed}:{number}")
        self.crash_at = crash_at
        self.crash_after = crash_after
        self.dead = False
        self.died = asyncio.Event()
        self.gateway: Replica | None = None

    async def stall(self, where: str) -> None:
        """Now and then a task of the replica stops for longer than a lease (a paused VM, a long
        GC, SIGSTOP): when it resumes, another replica may hold its action."""
        if "stall" not in self.world.knobs.off:
            self.world.counts["replica_stall"] += 1
            pause = 10 + self.stalls.random() * 30
            self.world.event(f"stall {self.name} {where} for {pause:.3f}s")
            await asyncio.sleep(pause)

    @property
    def running(self) -> Replica:
        """Its parts (only once started: `World.alive` lists started replicas only)."""
        assert self.gateway is not None, f"{self.name} is not started"
        return self.gateway

    # Both are read at every step of the protocol: the loop's time is read directly.

    def wall(self) -> float:
        return (config.EPOCH + self.loop._now) + self.skew  # World.now() + skew

    def monotonic(self) -> float:
        return self.mono0 + self.loop._now * self.rate

    async def crash_here(self, where: str, phase: str) -> None:
        self.crash(f"at its call {self.calls} ({where}, {phase})")
        await _forever(self.world.frozen)

    def crash(self, why: str) -> None:
        if self.dead:
            return
        self.dead = True
        self.died.set()
        self.world.event(f"crash {self.name} {why}")
        self.world.counts["crash"] += 1
        self.world.crashed(self)

    async def start(self, config: Config, adapters: Mapping[str, Hookable]) -> None:
        store = SimStore(self.world.db, Gate(self, "store", self.world.store_faults))
        await store.open()
        gate = Gate(self, "provider", None)
        mine = {name: adapter.with_hooks(gate) for name, adapter in adapters.items()}
        self.gateway = await build_replica(
            config,
            store,
            mine,
            health_aio.HealthServicer(),
            services=("",),
            audited=("dev",),
            owner=self.name,
            wall=self.wall,
            monotonic=self.monotonic,
        )
        self.gateway.background.start()


async def _forever(keep: list[asyncio.Future[None]]) -> None:
    """Never returns. The world keeps the future, and with it the frozen task: collected in the
    middle of a run, the task's `finally` blocks would run then, at a moment the garbage
    collector chooses (a cancelled waits feed, a lease let go), and no seed would replay."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    keep.append(future)
    await future


def pick(rng: random.Random, replicas: list[SimReplica], ok: Callable[[SimReplica], bool]) -> SimReplica | None:
    alive = [r for r in replicas if ok(r)]
    return rng.choice(alive) if alive else None
