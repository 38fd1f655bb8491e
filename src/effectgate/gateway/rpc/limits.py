"""Size limits on what callers send, so one oversized id cannot make an action (or a whole
ListActions page) unreadable, and an error never echoes a long value back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from google.protobuf.message import Message

from effectgate.gateway.model import InvalidRequest

# Clients (grpc's default) accept 4 MiB: a page stays well under it whatever the server allows.
CLIENT_RECEIVE_LIMIT = 4 << 20


@dataclass(frozen=True)
class Limits:
    """From [gateway] max_id_bytes / max_note_bytes (their defaults live in the config schema)."""

    # run_id, step_id, scope, agent, parent_run_id, tool_call_id, tool, action ids.
    max_id_bytes: int
    # One operator note (Approve, Reconcile, GrantBypass).
    max_note_bytes: int
    # Bytes of the records of one ListActions page.
    max_page_bytes: int

    @classmethod
    def for_server(cls, max_id_bytes: int, max_note_bytes: int, max_send_bytes: int) -> Limits:
        return cls(max_id_bytes, max_note_bytes, min(max_send_bytes, CLIENT_RECEIVE_LIMIT) // 2)

    def check_ids(self, fields: Iterable[tuple[str, str]]) -> None:
        _check(fields, self.max_id_bytes)

    def check_note(self, name: str, note: str) -> None:
        _check([(name, note)], self.max_note_bytes)

    def check_page_token(self, token: str) -> None:
        # A token encodes an action id and a time (base64): a few times an id at most.
        _check([("page_token", token)], 4 * self.max_id_bytes)


def _check(fields: Iterable[tuple[str, str]], limit: int) -> None:
    # The message says how long the value is, never what it holds.
    violations = [
        (name, f"is {size} bytes; at most {limit} allowed")
        for name, value in fields
        if (size := len(value.encode())) > limit
    ]
    if violations:
        raise InvalidRequest(violations)


def fit_page(messages: Sequence[Message], budget: int) -> int:
    """How many of `messages` (at least one) fit in `budget` bytes on the wire."""
    used = 0
    for count, message in enumerate(messages):
        used += message.ByteSize() + 8  # field tag and length prefix
        if used > budget and count > 0:
            return count
    return len(messages)
