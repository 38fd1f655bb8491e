"""The gRPC listener: the server's TLS credentials (checked at start-up, reloadable on SIGHUP)
and the bind of its address, which names the reason when it cannot be had.

The listener is exclusive: no SO_REUSEPORT (but for the workers of one `serve --workers N`), so a
second gateway on the same port fails to start instead of silently sharing the agents'
connections with another store. A Unix socket (`listen = "unix:PATH"`) is exclusive too: gRPC
would unlink a socket file already at the path and bind anew, taking the address from a gateway
that serves there, so a lock beside it (PATH.lock, held while the gateway serves, as PostgreSQL
holds its socket's) refuses the second one; a socket file left by a gateway that died (nothing
answers on it) is replaced, anything else at PATH is refused and left as it is. The socket is
made mode 0660 whatever the umask: a caller on it counts as local (no TLS for tokens, and
development mode has no tokens at all), so only the gateway's user and group may connect. A
graceful stop removes the socket file and its lock. `effectgate check` asks the same functions
whether the address could be had, taking nothing (commands/listen_check.py).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import ssl
import stat
import sys
from dataclasses import dataclass
from typing import Any, Literal

import grpc

from effectgate.gateway.config import Config, ConfigError, unix_path
from effectgate.gateway.runtime.startup import POOL_HOLDS, pool_claims

# Who may connect to the gateway's Unix socket: its user and its group (other users never).
SOCKET_MODE = 0o660


@dataclass
class _Held:
    """A Unix socket's address this process holds: its lock, and the socket file it made."""

    lock: int  # PATH.lock's descriptor, flocked
    socket: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket file bound at PATH


# The Unix sockets this process holds, by path.
_unix_locks: dict[str, _Held] = {}


class ListenError(OSError):
    """The listen address cannot be bound (in use, not local, no permission)."""


class AddressInUse(ListenError):
    """The address is held now (a gateway or another program): it may be free later."""


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


def cannot_listen(listen: str, setting: str, why: object) -> str:
    """The line of an address that cannot be had. The gateway's other ports name their `setting`
    (e.g. "[webhooks] listen"); [server] listen's does not."""
    return f"cannot listen on {listen}{f' ({setting})' if setting else ''}: {why}"


def refusal(listen: str, exc: OSError, setting: str = "") -> ListenError:
    """A HOST:PORT that cannot be had (cannot_listen's line); AddressInUse while a socket holds it,
    naming a `serve --workers` pool when one has claimed the port."""
    if exc.errno != errno.EADDRINUSE:
        return ListenError(cannot_listen(listen, setting, exc.strerror or exc))
    why = exc.strerror or exc
    if pool_claims(listen.rpartition(":")[2]):
        why = f"{why} ({POOL_HOLDS})"
    return AddressInUse(cannot_listen(listen, setting, why))


def probe_bind(listen: str, setting: str = "") -> None:
    """Binds (then frees) the address the way grpc will, to name the reason when it is taken.

    grpc would only log a C-level line and return port 0; this gives one clear error instead.
    Port 0 too: no one holds it, but a host that is not this one's is named."""
    host, _, port = listen.rpartition(":")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise refusal(listen, exc, setting) from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise refusal(listen, exc, setting) from None


# What may lie at a Unix socket's path instead of a socket, as a refusal names it.
_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "a file of another kind")


def check_directory(address: str, path: str) -> None:
    """The socket's directory exists and this user may make files in it."""
    parent = os.path.dirname(path)
    try:
        mode = os.stat(parent).st_mode
    except FileNotFoundError:
        raise ListenError(f"cannot listen on {address}: the directory {parent} does not exist") from None
    except OSError as exc:
        raise ListenError(f"cannot listen on {address}: the directory {parent}: {exc.strerror}") from None
    if not stat.S_ISDIR(mode):
        raise ListenError(f"cannot listen on {address}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ListenError(
            f"cannot listen on {address}: the directory {parent} is not writable by this user (uid {os.geteuid()})"
        )


def open_lock(address: str, lock: str, create: bool = True) -> int | None:
    """PATH.lock opened (made if missing; without `create`, None if missing), never
    through a symbolic link, never a file of someone else's: a gateway's lock is an empty regular file."""
    made = os.O_CREAT if create else 0  # opened for writing either way: the same refusals (EISDIR, EACCES)
    try:
        fd = os.open(lock, os.O_RDWR | made | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ENOENT and not create:
            return None
        why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise ListenError(f"cannot listen on {address}: cannot open its lock {lock} ({why})") from None
    found = os.fstat(fd)
    why = ""
    if not stat.S_ISREG(found.st_mode) or found.st_size:
        why = f"{lock} is not a gateway's lock (that is an empty file)"
    elif found.st_uid != os.geteuid():  # its owner could unlink it under us, letting a second gateway in
        why = f"{lock} belongs to uid {found.st_uid}, not to this user (uid {os.geteuid()})"
    if why:
        os.close(fd)
        raise ListenError(f"cannot listen on {address}: {why}; left as it is")
    return fd


def _identity(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of what is at `path` itself (a link is not followed); None: nothing."""
    try:
        here = os.lstat(path)
    except FileNotFoundError:
        return None
    return here.st_dev, here.st_ino


def _same_file(fd: int, path: str) -> bool:
    held = os.fstat(fd)
    return _identity(path) == (held.st_dev, held.st_ino)


def _answers(path: str) -> bool:
    """A process accepts connections on the socket file `path` (False: one left by a dead one)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)  # a full backlog says EAGAIN at once: someone listens
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except BlockingIOError:
            return True
    return True


def in_use_by_gateway(address: str) -> AddressInUse:
    return AddressInUse(f"cannot listen on {address}: the address is in use (another gateway serves there)")


Occupant = Literal["nothing", "a stale socket", "a live socket"]


def occupant(address: str, path: str) -> Occupant:
    """What lies at PATH: "nothing", "a stale socket" (nobody answers on it) or "a live socket";
    anything else is a ListenError (it stays as it is)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "nothing"
    if not stat.S_ISSOCK(mode):
        raise ListenError(f"cannot listen on {address}: {path} is {_kind(mode)}, not a socket; left as it is")
    try:
        alive = _answers(path)
    except OSError as exc:
        raise ListenError(
            f"cannot listen on {address}: cannot tell whether {path} is in use ({exc.strerror})"
        ) from None
    return "a live socket" if alive else "a stale socket"


def in_use_by_process(address: str, path: str) -> AddressInUse:
    return AddressInUse(
        f"cannot listen on {address}: the address is in use (a process answers on {path}, without a gateway's lock)"
    )


def check_path(address: str, path: str) -> None:
    """Nothing at PATH, or a socket file nobody answers on: anything else stays as it is."""
    if occupant(address, path) == "a live socket":
        raise in_use_by_process(address, path)


def _claim_unix(address: str, path: str) -> None:
    """Takes the socket's lock (kept by this process until `release`), or a ListenError."""
    if path in _unix_locks:  # ours already: the waiting room's, handed on to the gateway
        return
    check_directory(address, path)
    lock = f"{path}.lock"
    for _ in range(100):
        fd = open_lock(address, lock)
        assert fd is not None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise in_use_by_gateway(address) from None
        if _same_file(fd, lock):
            break
        os.close(fd)  # the gateway that held it removed it as it stopped: lock the one there now
    else:
        raise ListenError(f"cannot listen on {address}: {lock} keeps being replaced")
    _unix_locks[path] = _Held(fd)
    try:
        check_path(address, path)
    except BaseException:
        release(address)
        raise


def _seal(address: str, path: str) -> tuple[int, int]:
    """Gives the socket file just bound at `path` SOCKET_MODE; its identity.

    Through a descriptor of the file itself (O_PATH): a chmod by name would follow a symbolic
    link put there in the meantime."""
    if sys.platform != "linux":  # BSDs and macOS have lchmod
        os.chmod(path, SOCKET_MODE, follow_symlinks=False)
        made = os.lstat(path)
        return made.st_dev, made.st_ino
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        made = os.fstat(fd)
        if not stat.S_ISSOCK(made.st_mode):
            raise ListenError(f"cannot listen on {address}: {path} was replaced as the socket was made")
        os.chmod(f"/proc/self/fd/{fd}", SOCKET_MODE)
    finally:
        os.close(fd)
    return made.st_dev, made.st_ino


def release(address: str) -> None:
    """Lets another process listen on the Unix socket `address` (nothing for HOST:PORT): removes
    the socket file this process made there (if still there) and the lock, then unlocks."""
    path = unix_path(address)
    held = _unix_locks.pop(path, None)
    if held is None:
        return
    try:
        # gRPC may have removed it already as its server stopped.
        if held.socket is not None and _identity(path) == held.socket:
            os.unlink(path)
        if _same_file(held.lock, f"{path}.lock"):
            os.unlink(f"{path}.lock")  # while locked: the next gateway locks a new one
    except OSError:
        pass  # a file someone else removed or may not be removed: the lock is dropped all the same
    finally:
        os.close(held.lock)


def _bind_unix(server: grpc.aio.Server, address: str, path: str, creds: grpc.ServerCredentials | None) -> None:
    _claim_unix(address, path)
    # Made owner-only (the umask is the process's, so for this instant every file is), then
    # opened to the group: no moment where a user outside them may connect.
    umask = os.umask(0o077)
    try:
        port = server.add_insecure_port(address) if creds is None else server.add_secure_port(address, creds)
    except RuntimeError:
        port = 0
    finally:
        os.umask(umask)
    if port == 0:
        release(address)
        raise ListenError(f"cannot listen on {address}: the socket cannot be made there (permissions?)")
    try:
        _unix_locks[path].socket = _seal(address, path)
    except ListenError:
        release(address)
        raise
    except OSError as exc:
        release(address)
        raise ListenError(f"cannot listen on {address}: the socket's mode cannot be set ({exc.strerror})") from None


def bind(server: grpc.aio.Server, address: str, creds: grpc.ServerCredentials | None, shared: bool) -> int:
    """Adds `address` to `server`; the port (0 for a Unix socket), or a ListenError naming why it
    cannot be had.

    The one bind of every server that takes the gateway's port (the gateway itself, and the
    waiting room that holds the port while the store is awaited)."""
    path = unix_path(address)
    if path:
        _bind_unix(server, address, path, creds)
        return 0
    if not shared:  # a worker's port is held (with SO_REUSEPORT) by its parent on purpose
        probe_bind(address)
    try:
        port = server.add_insecure_port(address) if creds is None else server.add_secure_port(address, creds)
    except RuntimeError:
        port = 0
    if port == 0:
        raise ListenError(
            f"cannot listen on {address}: the address is in use (another gateway or program) "
            "or not an address of this host"
        )
    return port


def listen(server: grpc.aio.Server, config: Config, shared: bool, certificates: Certificates | None) -> int:
    return bind(server, config.listen, credentials(config, certificates), shared)
