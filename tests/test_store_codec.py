"""The stored record's schema is the store's own: its keys are fixed here, not derived from the
dataclasses, so a rename in the adapter API cannot change what is on disk unnoticed."""

from __future__ import annotations

import json

import pytest

from effectgate.adapters.base import Receipt
from effectgate.gateway.model.domain import NextStep, State
from effectgate.gateway.store import codec
from tests.store_backends import record, rich_record

BODY_KEYS = [
    "schema_version", "action_id", "tenant", "run_id", "step_id", "tool", "scope", "payload_type", "payload",
    "fingerprint", "state", "created_at", "updated_at", "parent_run_id", "agent", "tool_call_id", "attempts",
    "generation", "fence", "lease_owner", "lease_expires_at", "receipt", "observation", "reason", "next_step",
    "next_check_at", "dispatched_at", "checks", "bypass_granted", "notes", "trace_parent",
    "attempt_ended_at", "policy_version", "approvals", "adapter",
]  # fmt: skip
RECEIPT_KEYS = ["external_id", "provider_request_id", "result", "at"]
OBSERVATION_KEYS = ["outcome", "detail", "evidence", "at", "receipt"]


def test_the_body_has_the_schema_of_version_4() -> None:
    body = json.loads(codec.encode(rich_record("r")))
    assert codec.SCHEMA_VERSION == 4 and body["schema_version"] == 4
    assert list(body) == BODY_KEYS
    assert list(body["receipt"]) == RECEIPT_KEYS
    assert list(body["observation"]) == OBSERVATION_KEYS
    assert list(body["observation"]["receipt"]) == RECEIPT_KEYS
    assert (body["state"], body["next_step"]) == ("CONFIRMED", "OPERATOR")
    assert body["observation"]["outcome"] == "confirmed"


def test_round_trip_is_exact() -> None:
    approved = rich_record("a").evolve(
        policy_version="pv_0123456789abcdef", approvals=("alice", "b\u00f6b"), adapter="stripe_b"
    )
    for rec in (rich_record("r"), approved, record("p"), record("u", state=State.UNKNOWN, next_check_at=5.0)):
        assert codec.decode(codec.encode(rec)) == rec


def test_a_minimal_version_1_body_takes_the_defaults() -> None:
    """Version 1 bodies carry no version; keys added later may be missing from old rows."""
    body = {
        "action_id": "old",
        "tenant": "acme",
        "run_id": "r",
        "step_id": "s",
        "tool": "t",
        "scope": "x",
        "payload_type": "p",
        "payload": "",
        "fingerprint": "f",
        "state": "CONFIRMED",
        "created_at": 1,
        "updated_at": 2,
        "receipt": {"external_id": "ch_1", "at": 3},
    }
    decoded = codec.decode(json.dumps(body))
    assert decoded.receipt == Receipt("ch_1", "", {}, 3.0)
    assert (decoded.attempts, decoded.checks, decoded.notes, decoded.next_step) == (0, 0, (), NextStep.NONE)
    assert isinstance(decoded.created_at, float) and decoded.observation is None


def test_a_newer_schema_is_refused_not_misread() -> None:
    body = json.loads(codec.encode(record("n")))
    body["schema_version"] = 5
    with pytest.raises(codec.SchemaVersionError, match="schema version 5"):
        codec.decode(json.dumps(body))


def test_odd_provider_text_survives() -> None:
    rec = rich_record("r").evolve(receipt=Receipt("x", result={"s": "\ud800 lone surrogate", "nul": "a\x00b"}, at=1.0))
    text = codec.encode(rec)
    assert text.isascii()
    assert codec.decode(text) == rec
