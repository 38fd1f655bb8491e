"""An SMTP server (aiosmtpd, on loopback) that delivers into a Maildir, with the shared faults.

Each accepted message is one effect in `ledger`, and is written into `maildir` (when given) so an
IMAP server reading that Maildir (Dovecot in the tests) really sees it. Faults are decided once
per DATA that passed RCPT (a "fresh write"):

- `drop_after_commit`: the message is delivered, then the connection is cut before the reply.
- `error_after_commit`: same as `drop_after_commit`. An SMTP reply is authoritative (a 4xx/5xx
  to DATA means "not taken", RFC 5321 §4.2.5), so a server that queued the message can only lose
  the reply, not contradict it.
- `slow`: delivered, then the 250 reply is held back `slow_seconds`.
- `lands_late`: delivered `slow_seconds` after the DATA (a client that hung up does not stop
  it), then the 250 reply.
- `conflict`: `451 4.7.1` (greylisting-style temporary refusal); nothing delivered.
- `partial`: delivered mangled: the Subject header is dropped on the way (a broken filter).
- `delayed_visibility`: 250 at once; the message reaches the Maildir `visibility_lag` later.

Recipients in `refuse_domain` are refused with `550 5.1.1` at RCPT (a definitive refusal).
"""

from __future__ import annotations

import asyncio
import contextlib
import mailbox
import os
import time
import warnings
from dataclasses import dataclass, field
from email import message_from_bytes
from email.parser import BytesHeaderParser
from email.policy import SMTP as SMTP_POLICY
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from effectgate_lab.simulators.faults import Fault, FaultInjector, FaultPlan

DEFAULT_VISIBILITY_LAG = 1.0


class MaildirDrop:
    """Writes messages into a Maildir, owned by `owner` (uid, gid) when the writer is root."""

    def __init__(self, path: Path, owner: tuple[int, int] | None = None) -> None:
        self._box = mailbox.Maildir(path, create=True)
        self._path = path
        self._owner = owner

    def deliver(self, raw: bytes) -> None:
        key = self._box.add(raw)
        if self._owner is not None and os.geteuid() == 0:
            # The IMAP server's mail process runs as `owner` and must read (and rename) it.
            os.chown(self._path / "new" / key, *self._owner)


@dataclass
class SmtpEffect:
    message_id: str
    mail_from: str
    rcpts: list[str]
    to: str
    subject: str
    fault: str
    at: float = field(default_factory=time.time)
    visible: bool = False


class SmtpSimulator:
    def __init__(
        self,
        *,
        maildir: MaildirDrop | None = None,
        faults: FaultPlan | None = None,
        visibility_lag: float = DEFAULT_VISIBILITY_LAG,
        refuse_domain: str = "invalid.test",
        credentials: tuple[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.injector = FaultInjector(faults)
        # Lag of a `delayed_visibility` delivery when the plan does not set one.
        self.visibility_lag = visibility_lag
        self.ledger: list[SmtpEffect] = []
        self._maildir = maildir
        self._refuse_domain = refuse_domain.lower()
        self._credentials = credentials
        self._host, self._want_port = host, port
        self._server: asyncio.Server | None = None
        self._pending: set[asyncio.TimerHandle] = set()
        self._late: set[asyncio.Task[None]] = set()  # `lands_late` deliveries not made yet
        self._connections: list[SMTP] = []
        self.port = 0

    @property
    def host(self) -> str:
        return self._host

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, self._host, self._want_port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        for task in list(self._late):
            task.cancel()
        for handle in self._pending:
            handle.cancel()
        self._pending.clear()
        if self._server is not None:
            self._server.close()
            for conn in self._connections:
                if conn.transport is not None:
                    conn.transport.close()
            self._connections.clear()
            await self._server.wait_closed()
            self._server = None

    def effects(self, message_id: str | None = None) -> int:
        """Messages accepted (delivered or about to be), all or those with this Message-ID."""
        return sum(1 for e in self.ledger if message_id is None or e.message_id == message_id)

    def _protocol(self) -> SMTP:
        if self._credentials is None:
            conn = SMTP(self, hostname="sim.effectgate.test")
        else:
            with warnings.catch_warnings():
                # AUTH without TLS is deliberate: the simulator only listens on loopback.
                warnings.filterwarnings("ignore", "Requiring AUTH while not requiring TLS")
                conn = SMTP(
                    self,
                    hostname="sim.effectgate.test",
                    auth_required=True,
                    auth_require_tls=False,
                    authenticator=self._authenticate,
                )
        self._connections = [c for c in self._connections if c.transport is not None]
        self._connections.append(conn)
        return conn

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = isinstance(data, LoginPassword) and self._credentials == (
            data.login.decode(),
            data.password.decode(),
        )
        return AuthResult(success=ok)

    # aiosmtpd handler hooks.
    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if address.rpartition("@")[2].lower() == self._refuse_domain:
            return "550 5.1.1 mailbox unavailable"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or b""
        fault = self.injector.decide()
        if fault in (Fault.CONFLICT, Fault.RATE_LIMIT):  # SMTP has no Retry-After: a 451 either way
            return "451 4.7.1 try again later (simulated)"
        if fault is Fault.PARTIAL:
            mangled = message_from_bytes(raw, policy=SMTP_POLICY)
            del mangled["Subject"]
            raw = mangled.as_bytes()
        headers = BytesHeaderParser(policy=default_policy).parsebytes(raw)
        effect = SmtpEffect(
            message_id=str(headers.get("Message-ID", "")).strip(),
            mail_from=str(envelope.mail_from),
            rcpts=list(envelope.rcpt_tos),
            to=str(headers.get("To", "")),
            subject=str(headers.get("Subject", "")),
            fault=fault.value if fault else "",
        )
        if fault is Fault.LANDS_LATE:
            # Delivered slow_seconds from now in a task of its own: a client that gives up and
            # hangs up does not stop it.
            late = asyncio.create_task(self._land_late(effect, raw))
            self._late.add(late)
            late.add_done_callback(self._late.discard)
            await asyncio.shield(late)
            return "250 OK queued as " + effect.message_id.strip("<>")
        self.ledger.append(effect)
        if fault is Fault.DELAYED_VISIBILITY:
            lag = self.injector.plan.visibility_lag
            self._deliver_later(effect, raw, self.visibility_lag if lag is None else lag)
        else:
            self._deliver(effect, raw)
        if fault in (Fault.DROP_AFTER_COMMIT, Fault.ERROR_AFTER_COMMIT):
            assert isinstance(server.transport, asyncio.Transport)
            server.transport.abort()  # the client never reads a reply
        elif fault is Fault.SLOW:
            await asyncio.sleep(self.injector.plan.slow_seconds)
        return "250 OK queued as " + effect.message_id.strip("<>")

    async def _land_late(self, effect: SmtpEffect, raw: bytes) -> None:
        await asyncio.sleep(self.injector.plan.slow_seconds)
        self.ledger.append(effect)
        with contextlib.suppress(OSError):
            self._deliver(effect, raw)

    def _deliver(self, effect: SmtpEffect, raw: bytes) -> None:
        if self._maildir is not None:
            self._maildir.deliver(raw)
        effect.visible = True

    def _deliver_later(self, effect: SmtpEffect, raw: bytes, lag: float) -> None:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._pending.discard(handle)
            with contextlib.suppress(OSError):
                self._deliver(effect, raw)

        handle = loop.call_later(lag, fire)
        self._pending.add(handle)
