"""The stored record's own schema: one JSON document per action, versioned, field by field.

The store owns this shape. It is written and read explicitly, key by key, so that renaming a field
of `ActionRecord` or of the adapter API's `Receipt` / `Observation` changes this module (and mypy
points at it) but never the bytes on disk: a rename there is not a storage migration.

Versions:
- 1: the untagged body written before this module existed (`ActionRecord.to_json` at the time).
  Its keys are the dataclass field names of that day; it is read, never written.
- 2: the same keys plus `"schema_version": 2`. Readers accept any version up to `SCHEMA_VERSION`
  and refuse a newer one (written by a newer gateway) instead of silently dropping its fields.
- 3: adds `policy_version` and `approvals` (what an approval binds to, who approved).
- 4: adds `adapter` (the adapter instance that dispatched the current attempt).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from effectgate.adapters.base import Observation, Outcome, Receipt
from effectgate.gateway.model import ActionRecord, NextStep, RecordTooNew, State
from effectgate.gateway.store.faults import StoreError

SCHEMA_VERSION = 4

# ASCII: a lone surrogate in a provider's JSON survives as an escape instead of failing the write.
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
_loads = json.loads


class SchemaVersionError(StoreError, RecordTooNew):
    """A stored record was written by a newer schema than this gateway knows: every RPC that
    reads it answers FAILED_PRECONDITION / RECORD_VERSION_TOO_NEW (rpc/status.py)."""


def encode(r: ActionRecord) -> str:
    """The body for `r` at the current schema version."""
    return _dumps(
        {
            "schema_version": SCHEMA_VERSION,
            "action_id": r.action_id,
            "tenant": r.tenant,
            "run_id": r.run_id,
            "step_id": r.step_id,
            "tool": r.tool,
            "scope": r.scope,
            "payload_type": r.payload_type,
            "payload": base64.b64encode(r.payload).decode("ascii"),
            "fingerprint": r.fingerprint,
            "state": r.state.value,
            "created_at": r.created_at,
            "updated_at": r.updated_at,
            "parent_run_id": r.parent_run_id,
            "agent": r.agent,
            "tool_call_id": r.tool_call_id,
            "attempts": r.attempts,
            "generation": r.generation,
            "fence": r.fence,
            "lease_owner": r.lease_owner,
            "lease_expires_at": r.lease_expires_at,
            "receipt": _encode_receipt(r.receipt),
            "observation": _encode_observation(r.observation),
            "reason": r.reason,
            "next_step": r.next_step.value,
            "next_check_at": r.next_check_at,
            "dispatched_at": r.dispatched_at,
            "checks": r.checks,
            "bypass_granted": r.bypass_granted,
            "notes": list(r.notes),
            "trace_parent": r.trace_parent,
            "attempt_ended_at": r.attempt_ended_at,
            "policy_version": r.policy_version,
            "approvals": list(r.approvals),
            "adapter": r.adapter,
        }
    )


def decode(body: str | bytes) -> ActionRecord:
    """The record in `body`, of any known schema version (later versions only add keys)."""
    d = _loads(body)
    version = d.get("schema_version", 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        action_id = d.get("action_id")
        raise SchemaVersionError(str(version), SCHEMA_VERSION, action_id if isinstance(action_id, str) else "")
    return ActionRecord(
        action_id=d["action_id"],
        tenant=d["tenant"],
        run_id=d["run_id"],
        step_id=d["step_id"],
        tool=d["tool"],
        scope=d["scope"],
        payload_type=d["payload_type"],
        payload=base64.b64decode(d["payload"]),
        fingerprint=d["fingerprint"],
        state=State(d["state"]),
        created_at=float(d["created_at"]),
        updated_at=float(d["updated_at"]),
        parent_run_id=d.get("parent_run_id", ""),
        agent=d.get("agent", ""),
        tool_call_id=d.get("tool_call_id", ""),
        attempts=d.get("attempts", 0),
        generation=d.get("generation", 0),
        fence=d.get("fence", 0),
        lease_owner=d.get("lease_owner", ""),
        lease_expires_at=float(d.get("lease_expires_at", 0.0)),
        receipt=_decode_receipt(d.get("receipt")),
        observation=_decode_observation(d.get("observation")),
        reason=d.get("reason", ""),
        next_step=NextStep(d.get("next_step", NextStep.NONE.value)),
        next_check_at=_optional_float(d.get("next_check_at")),
        dispatched_at=_optional_float(d.get("dispatched_at")),
        checks=d.get("checks", 0),
        bypass_granted=bool(d.get("bypass_granted", False)),
        notes=tuple(d.get("notes", ())),
        trace_parent=d.get("trace_parent", ""),
        attempt_ended_at=_optional_float(d.get("attempt_ended_at")),
        policy_version=d.get("policy_version", ""),
        approvals=tuple(d.get("approvals", ())),
        adapter=d.get("adapter", ""),
    )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _encode_receipt(receipt: Receipt | None) -> dict[str, Any] | None:
    if receipt is None:
        return None
    return {
        "external_id": receipt.external_id,
        "provider_request_id": receipt.provider_request_id,
        "result": receipt.result,
        "at": receipt.at,
    }


def _decode_receipt(d: dict[str, Any] | None) -> Receipt | None:
    if not d:
        return None
    return Receipt(
        external_id=d["external_id"],
        provider_request_id=d.get("provider_request_id", ""),
        result=d.get("result") or {},
        at=float(d["at"]),
    )


def _encode_observation(obs: Observation | None) -> dict[str, Any] | None:
    if obs is None:
        return None
    return {
        "outcome": obs.outcome.value,
        "detail": obs.detail,
        "evidence": obs.evidence,
        "at": obs.at,
        "receipt": _encode_receipt(obs.receipt),
    }


def _decode_observation(d: dict[str, Any] | None) -> Observation | None:
    if not d:
        return None
    return Observation(
        outcome=Outcome(d["outcome"]),
        detail=d.get("detail", ""),
        evidence=d.get("evidence") or {},
        at=float(d["at"]),
        receipt=_decode_receipt(d.get("receipt")),
    )
