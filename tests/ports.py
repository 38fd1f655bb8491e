"""Ports for tests on a shared machine (xdist workers, maybe a second copy of the suite beside).

A port picked by binding port 0 and closing the socket is free only until someone else binds it:
a child handed that number may find it taken. So a child that can bind port 0 does, and says
which port it got (`serving on port N`, `metrics on port N`); a child that must be told its port
before it starts (PostgreSQL's `-p`, Dovecot's config, a container's HEALTHCHECK target) is
started again on another port when it lost the one picked for it (`start_on_free_ports`); and a
port where nothing may listen is held, bound and never listened on, for as long as it is used
(`closed_port`). A restart on the same port (the claim of a few tests) keeps it: that port was
its own until the restart, and nothing can move it.
"""

from __future__ import annotations

import functools
import re
import socket
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from effectgate_lab.labkit.children import free_port

T = TypeVar("T")

# What a child says when the port it was told to bind is taken: Python's, gRPC's, Dovecot's
# "Address already in use", PostgreSQL's "could not bind IPv4 address".
TAKEN = re.compile(r"address already in use|could not bind|EADDRINUSE|errno 98", re.IGNORECASE)


def port_taken(text: str) -> bool:
    """Whether `text` (a child's error, its log) says a port it had to bind was taken."""
    return TAKEN.search(text) is not None


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port where nothing listens, for as long as the block runs: bound (without
    SO_REUSEADDR) and never listened on, so a connection to it is refused and no other process
    can bind it meanwhile. A port picked and released could be taken and answered by anyone."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        yield int(holder.getsockname()[1])


@functools.cache
def nowhere() -> int:
    """`closed_port()` held for the life of this process (an xdist worker): for a helper that
    returns a URL rather than a block to hold it in."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    _held.append(holder)
    return int(holder.getsockname()[1])


_held: list[socket.socket] = []


async def start_on_free_ports(
    start: Callable[[Sequence[int]], Awaitable[T]], count: int = 1, attempts: int = 5
) -> tuple[T, list[int]]:
    """`start(ports)` on `count` freshly picked ports; when it fails because a child lost one of
    them to another process between the pick and its bind (its error says so), again on new
    ones, at most `attempts` times. `start` must leave nothing running when it raises."""
    for attempt in range(attempts):
        ports = pick(count)
        try:
            return await start(ports), ports
        except Exception as exc:
            if attempt == attempts - 1 or not port_taken(str(exc)):
                raise
    raise AssertionError("unreachable")


def pick(count: int) -> list[int]:
    """`count` distinct ports free at the time of the call (see the module's docstring for why a
    child handed one must be restarted on another when it is taken by then)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports
