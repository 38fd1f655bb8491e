"""A throw-away Dovecot IMAP server for tests: the SMTP adapter's read API made real.

Everything lives in a temporary directory: the config, a passwd-file with one user, that user's
Maildir, and Dovecot's base/state directories. It listens on a free port on 127.0.0.1 only, with
plain-text login and no TLS. Mail processes never run as root (Dovecot refuses UID 0), so as root
the mail is owned by `nobody`, and whoever writes into the Maildir must chown (`MaildirDrop` in
effectgate_lab.simulators.smtp_sim does, given `owner`).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from effectgate_lab.labkit.children import free_port
from tests.ports import port_taken

USER = "agent"
ATTEMPTS = 5  # starts on a newly picked port when the last one was taken


def find_dovecot() -> str | None:
    return shutil.which("dovecot") or ("/usr/sbin/dovecot" if os.path.exists("/usr/sbin/dovecot") else None)


@dataclass
class DovecotServer:
    root: Path
    port: int
    user: str
    password: str
    maildir: Path
    # uid/gid the Maildir's files must belong to.
    owner: tuple[int, int]
    process: subprocess.Popen[bytes] | None = None

    def log(self) -> str:
        path = self.root / "dovecot.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def destroy(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _config(root: Path, port: int, owner: tuple[int, int], greeting: str) -> str:
    lines = [
        f"login_greeting = {greeting}",
        f"base_dir = {root}/run",
        f"state_dir = {root}/state",
        f"log_path = {root}/dovecot.log",
        "protocols = imap",
        "listen = 127.0.0.1",
        "ssl = no",
        "disable_plaintext_auth = no",
        "auth_mechanisms = plain login",
        f"mail_location = maildir:{root}/mail/%u",
        "first_valid_uid = 1",
        "passdb {",
        "  driver = passwd-file",
        f"  args = scheme=PLAIN {root}/passwd",
        "}",
        "userdb {",
        "  driver = static",
        f"  args = uid={owner[0]} gid={owner[1]} home={root}/mail/%u",
        "}",
        "service imap-login {",
        "  chroot =",
        "  inet_listener imap {",
        "    address = 127.0.0.1",
        f"    port = {port}",
        "  }",
        "  inet_listener imaps {",
        "    port = 0",
        "  }",
        "}",
        "service anvil {",
        "  chroot =",
        "}",
    ]
    if os.geteuid() != 0:
        # Unprivileged: every Dovecot process runs as the current user.
        me = pwd.getpwuid(os.getuid()).pw_name
        lines += [f"default_internal_user = {me}", f"default_login_user = {me}"]
    return "\n".join(lines) + "\n"


def start_server(binary: str, *, password: str | None = None, timeout: float = 15.0) -> DovecotServer:
    root = Path(tempfile.mkdtemp(prefix="eg-dovecot-"))
    os.chmod(root, 0o755)  # Dovecot's unprivileged processes must reach the Maildir
    owner = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    password = password or secrets.token_urlsafe(12)
    maildir = root / "mail" / USER
    for sub in ("run", "state", "mail"):
        (root / sub).mkdir()
    for sub in ("cur", "new", "tmp"):
        (maildir / sub).mkdir(parents=True)
    (root / "passwd").write_text(f"{USER}:{{PLAIN}}{password}::::::\n")
    for path in [root / "mail", maildir, *maildir.iterdir()]:
        os.chown(path, *owner)
    # Dovecot must be told its port: picked here, and picked again when another process took
    # it before Dovecot bound it. The greeting names this server, so a server that took the
    # port first is never mistaken for it.
    greeting = f"eg-dovecot-{secrets.token_hex(6)}"
    for attempt in range(ATTEMPTS):
        port = free_port()
        (root / "dovecot.conf").write_text(_config(root, port, owner, greeting))
        (root / "dovecot.log").unlink(missing_ok=True)
        try:
            return _start(binary, DovecotServer(root, port, USER, password, maildir, owner), greeting, timeout)
        except PortTaken:
            if attempt == ATTEMPTS - 1:
                shutil.rmtree(root, ignore_errors=True)
                raise
    raise AssertionError("unreachable")


class PortTaken(RuntimeError):
    """Dovecot could not bind the port picked for it."""


def _start(binary: str, server: DovecotServer, greeting: str, timeout: float) -> DovecotServer:
    """Starts Dovecot for `server` and waits for its own greeting on its port; a failed start
    leaves nothing running (and the directory only when the port was taken: tried again)."""
    root, port = server.root, server.port
    proc = subprocess.Popen(
        [binary, "-F", "-c", str(root / "dovecot.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    server.process = proc
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            log = server.log()
            if port_taken(err + log):
                raise PortTaken(f"dovecot lost port {port}: {err}{log}")
            server.destroy()
            raise RuntimeError(f"dovecot exited: {err}{log}")
        try:
            if greeting in _first_line(port):
                return server
        except OSError:
            time.sleep(0.05)
    server.destroy()
    raise RuntimeError(f"dovecot did not accept IMAP connections within {timeout}s")


def _first_line(port: int) -> str:
    """The first line a server on `port` sends (an IMAP server's greeting)."""
    with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
        got = b""
        while b"\n" not in got and len(got) < 4096:
            chunk = conn.recv(512)
            if not chunk:
                break
            got += chunk
    return got.decode(errors="replace")
