"""The gRPC listener: the server's TLS credentials (checked at start-up, reloadable on SIGHUP)
and the bind of its address, which names the reason when it cannot be had.

The listener is exclusive: no SO_REUSEPORT (but for the workers of one `serve --workers N`), so a
second gateway on the same port fails to start instead of silently sharing the agents'
connections with another store. A Unix socket (`listen = "unix:PATH"`) is exclusive too: gRPC
would unlink a socket file already at the path and bind anew, taking the address from a gateway
that serves there, so a lock beside it (PATH.lock, held while the gateway serves, as PostgreSQL
holds its socket's) refuses the second one; a socket file left by a gateway that died is replaced.
"""

from __future__ import annotations

import fcntl
import os
import socket
import ssl
import stat
from typing import Any

import grpc

from effectgate.gateway.config import Config, ConfigError, unix_path

# The Unix sockets' locks this process holds: path -> the lock file's descriptor.
_unix_locks: dict[str, int] = {}


class ListenError(OSError):
    """The listen address cannot be bound (in use, not local, no permission)."""


def _why(exc: OSError) -> str:
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc.library or "unreadable")
    return str(exc.strerror or exc)


def _check_tls_files(config: Config) -> None:
    """Loads the PEM files the way a TLS library does, so a wrong file is named at start-up
    (grpc would only fail to bind, which reads like a port problem)."""
    tls = config.tls
    assert tls is not None
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(tls.cert_file, tls.key_file)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"{config.source}: [server.tls] cert_file, key_file: not a PEM certificate and its private key "
            f"({_why(exc)})"
        ) from None
    if tls.client_ca_file:
        try:
            ssl.create_default_context(cafile=tls.client_ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"{config.source}: [server.tls] client_ca_file: not PEM CA certificates ({_why(exc)})"
            ) from None


def _certificates(config: Config) -> grpc.ServerCertificateConfiguration:
    tls = config.tls
    assert tls is not None
    _check_tls_files(config)
    with open(tls.key_file, "rb") as key, open(tls.cert_file, "rb") as cert:
        pair = (key.read(), cert.read())
    root = None
    if tls.client_ca_file:
        with open(tls.client_ca_file, "rb") as ca:
            root = ca.read()
    return grpc.ssl_server_certificate_configuration([pair], root_certificates=root)


class Certificates:
    """The server's certificates, swappable without a restart (SIGHUP): gRPC asks `fetch` at each
    new handshake; established connections keep theirs."""

    def __init__(self, config: Config) -> None:
        self.mutual = bool(config.tls and config.tls.client_ca_file)
        self._pending: grpc.ServerCertificateConfiguration | None = None
        self.initial = _certificates(config)

    def replace(self, config: Config) -> None:
        """Loads the new files (raises ConfigError when they are unusable; the old stay)."""
        self._pending = _certificates(config)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """None: no change since the last handshake."""
        pending, self._pending = self._pending, None
        return pending

    def credentials(self) -> grpc.ServerCredentials:
        fetch: Any = self.fetch  # grpc's stubs forget that the fetcher may answer None
        return grpc.dynamic_ssl_server_credentials(self.initial, fetch, require_client_authentication=self.mutual)


def credentials(config: Config, certificates: Certificates | None = None) -> grpc.ServerCredentials | None:
    """The listener's credentials (None: plaintext); `certificates` makes them reloadable."""
    if config.tls is None:
        return None
    return (certificates or Certificates(config)).credentials()


def _probe_bind(listen: str) -> None:
    """Binds (then frees) the address the way grpc will, to name the reason when it is taken.

    grpc would only log a C-level line and return port 0; this gives one clear error instead."""
    host, _, port = listen.rpartition(":")
    if int(port) == 0:
        return
    try:
        infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {listen}: {exc.strerror}") from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise ListenError(f"cannot listen on {listen}: {exc.strerror}") from None


def _claim_unix(address: str, path: str) -> None:
    """Takes the socket's lock (kept by this process until `release`), or a ListenError."""
    if path in _unix_locks:  # ours already: the waiting room's, handed on to the gateway
        return
    try:
        fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ListenError(f"cannot listen on {address}: {exc.strerror} ({path}.lock)") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.path.lexists(path) and not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise ListenError(f"cannot listen on {address}: {path} exists and is not a socket")
    except BlockingIOError:
        os.close(fd)
        raise ListenError(f"cannot listen on {address}: the address is in use (another gateway serves there)") from None
    except BaseException:
        os.close(fd)
        raise
    _unix_locks[path] = fd


def release(address: str) -> None:
    """Lets another process listen on the Unix socket `address` (nothing for HOST:PORT)."""
    fd = _unix_locks.pop(unix_path(address), None)
    if fd is not None:
        os.close(fd)


def bind(server: grpc.aio.Server, address: str, creds: grpc.ServerCredentials | None, shared: bool) -> int:
    """Adds `address` to `server`; the port (0 for a Unix socket), or a ListenError naming why it
    cannot be had.

    The one bind of every server that takes the gateway's port (the gateway itself, and the
    waiting room that holds the port while the store is awaited)."""
    path = unix_path(address)
    if path:
        _claim_unix(address, path)
    elif not shared:  # a worker's port is held (with SO_REUSEPORT) by its parent on purpose
        _probe_bind(address)
    try:
        port = server.add_insecure_port(address) if creds is None else server.add_secure_port(address, creds)
    except RuntimeError:
        port = 0
    if port == 0 and path:
        release(address)
        raise ListenError(f"cannot listen on {address}: the socket cannot be made there (permissions?)")
    if port == 0:
        raise ListenError(
            f"cannot listen on {address}: the address is in use (another gateway or program) "
            "or not an address of this host"
        )
    return 0 if path else port


def listen(server: grpc.aio.Server, config: Config, shared: bool, certificates: Certificates | None) -> int:
    return bind(server, config.listen, credentials(config, certificates), shared)
