"""A loopback TCP port kept by its owner across the restarts of whatever serves on it (a
simulator in this process, a worker child handed the socket), so clients keep their address.

A port freed between a stop and the next start can be taken by any process on the machine (a
second suite, an outgoing connection's ephemeral port). Held here, it never is:

- serving: the socket listens (the server accepts on it, or on a duplicate of it);
- paused: it is shut down for reading (Linux: no longer listening, connections are refused)
  but stays bound, without SO_REUSEADDR, which no other socket's bind may share;
- listening again: the same socket, SO_REUSEADDR set first (the last run's connections in
  TIME_WAIT keep the option the listener had, and would refuse the listen without it).

The port is bound by number, never as port 0: a socket bound to port 0 lets its port go when it
stops listening.
"""

from __future__ import annotations

import contextlib
import errno
import socket

from effectgate_lab.labkit.children import free_port

LOOPBACK = "127.0.0.1"


def _bound(attempts: int) -> socket.socket:
    """A socket bound to a free loopback port named explicitly. The number is read from a probe:
    when another process took it meanwhile, this bind says so and another is read."""
    for _ in range(attempts):
        port = free_port()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((LOOPBACK, port))
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise
            continue
        return sock
    raise OSError(errno.EADDRINUSE, f"no free loopback port in {attempts} tries")


class HeldPort:
    """See the module's docstring. `close()` lets the port go."""

    def __init__(self, attempts: int = 20) -> None:
        self.socket = _bound(attempts)
        self.port: int = self.socket.getsockname()[1]

    def listen(self, backlog: int = 128) -> socket.socket:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.listen(backlog)
        return self.socket

    def pause(self) -> None:
        """Refuses connections from now on; the port stays held."""
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        with contextlib.suppress(OSError):  # ENOTCONN: it was not listening
            self.socket.shutdown(socket.SHUT_RD)

    def close(self) -> None:
        self.socket.close()
