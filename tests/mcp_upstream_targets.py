"""The `mcp` adapter against the lab's upstream MCP simulators (lab/…/mcp_upstream), on both
transports: a mail server that deduplicates on a key argument and an issue tracker that does
not, each over streamable HTTP on loopback (in this process) and over stdio (a child the adapter
launches). Shared by the conformance suite and the gateway tests."""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format, struct_pb2

from effectgate.adapters.mcp import McpAdapter
from effectgate_lab.mcp_upstream.http import McpHttpSimulator
from effectgate_lab.mcp_upstream.ledger import FaultScript, Ledger

CANARY = "mcp-canary-7f3a91c2e4"
NAMES = ["mail-http", "tracker-http", "mail-stdio", "tracker-stdio"]
VISIBILITY_LAG = 1.0
SLOW = 5.0

MAIL: dict[str, Any] = {
    "tool": "send_message",
    "key_argument": "idempotency_key",
    "verify": {
        "tool": "list_messages",
        "arguments": {"idempotency_key": "{provider_key}"},
        "receipt_id": "result.messages[0].id",
    },
    "match": (
        "result.messages.exists(m, m.idempotency_key == action.provider_key"
        " && m.to == payload.to && m.body == payload.body)"
    ),
    "absent": "size(result.messages) == 0",
    "no_effect_when": 'result.error in ["unauthorized", "rate_limited"]',
    "retry_after": "result.retry_after",
    "refused_when": 'result.error == "invalid_recipient"',
    "success_when": "result.body == payload.body",
    "consistency_window": 2.0,
}
TRACKER: dict[str, Any] = {
    "tool": "create_issue",
    # No key upstream: the provider key (action id and generation) rides in the body, so a read
    # finds this generation's issue, never an earlier generation's.
    "arguments": {"title": "{title}", "body": "{body}\n\n[{provider_key}]", "labels": "{labels}"},
    "verify": {
        "tool": "list_issues",
        "arguments": {"query": "[{provider_key}]"},
        "receipt_id": "result.issues[0].id",
    },
    "match": "size(result.issues) == 1 && result.issues[0].labels == payload.labels",
    "absent": "size(result.issues) == 0",
    "no_effect_when": 'result.error in ["unauthorized", "rate_limited"]',
    "retry_after": "result.retry_after",
    "refused_when": 'result.error == "invalid_title"',
    "success_when": "result.labels == payload.labels",
    "consistency_window": 2.0,
}


def table(kind: str) -> dict[str, Any]:
    return dict(MAIL if kind == "mail" else TRACKER)


def payload(kind: str, tag: str, **changes: Any) -> struct_pb2.Struct:
    if kind == "mail":
        doc: dict[str, Any] = {"to": f"user-{tag}@example.com", "subject": f"hello {tag}", "body": f"body {tag}"}
    else:
        doc = {"title": f"bug {tag}", "body": f"steps {tag}", "labels": ["bug", "p2"]}
    doc.update(changes)
    return json_format.ParseDict(doc, struct_pb2.Struct())


def stdio_command(kind: str, ledger: Path, faults: Path, *, token: str = CANARY, **options: float) -> list[str]:
    cmd = [sys.executable, "-m", "effectgate_lab.mcp_upstream", "--kind", kind, "--ledger", str(ledger)]
    cmd += ["--faults", str(faults), "--expect-token", token, "--visibility-lag", str(VISIBILITY_LAG)]
    for name, value in options.items():
        cmd += [f"--{name.replace('_', '-')}", str(value)]
    return cmd


@dataclass
class McpTarget:
    """A ConformanceTarget (effectgate.adapters.testing) for one simulator and transport."""

    name: str
    kind: str
    transport: str
    workdir: Path
    canary: str = CANARY
    visibility_lag: float = VISIBILITY_LAG
    partial_hidden_in_reply: bool = False
    # The simulators' `slow` hold and the pause their `rate_limit` fault names (servers.py).
    slow_seconds: float = SLOW
    retry_after: float | None = 0.1
    http: McpHttpSimulator | None = None
    ledger: Ledger = field(init=False)
    faults: FaultScript = field(init=False)

    def __post_init__(self) -> None:
        if self.http is not None:
            self.ledger, self.faults = self.http.ledger, self.http.faults
        else:
            self.ledger = Ledger(self.workdir / f"{self.kind}.ledger.jsonl")
            self.faults = FaultScript(self.workdir / f"{self.kind}.faults.json")

    def settings(self, secret: str | None = None, **changes: Any) -> dict[str, Any]:
        env = f"EG_MCP_TOKEN_{uuid.uuid4().hex[:8].upper()}"
        os.environ[env] = secret if secret is not None else self.canary
        where: dict[str, Any]
        if self.http is not None:
            where = {"url": self.http.url}
        else:
            # A Python child per session: its start-up takes seconds on a loaded machine.
            where = {
                "command": stdio_command(self.kind, self.ledger.path, self.faults.path),  # type: ignore[arg-type]
                "connect_timeout": 30.0,
            }
        return {**table(self.kind), **where, "token_env": env, "timeout": 2.0, **changes}

    async def build(self, secret: str | None = None, *, timeout: float | None = None) -> McpAdapter:
        changes = {} if timeout is None else {"timeout": timeout}
        return McpAdapter.from_settings(self.name, self.settings(secret, **changes))

    def good_payload(self, tag: str) -> struct_pb2.Struct:
        return payload(self.kind, tag)

    def refused_payload(self, tag: str) -> struct_pb2.Struct:
        return payload(self.kind, tag, to="nobody") if self.kind == "mail" else payload(self.kind, tag, title=" ")

    def inject(self, *faults: str | None) -> None:
        self.faults.script(list(faults))

    async def effects(self) -> int:
        return len(self.ledger.effects())

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.close()


async def start_target(name: str, workdir: Path) -> McpTarget:
    kind, transport = name.split("-")
    http = None
    if transport == "http":
        http = McpHttpSimulator(kind, token=CANARY, visibility_lag=VISIBILITY_LAG, slow_seconds=SLOW)
        await http.start()
    return McpTarget(name, kind, transport, workdir, http=http)
