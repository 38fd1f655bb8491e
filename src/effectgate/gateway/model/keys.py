"""Keys: the action id, the payload fingerprint and the provider idempotency key.

The action id comes only from what the agent runtime injected (tenant, run, step) and what the
tool call is about (tool, scope): never from model-written arguments and never from the model's
tool-call id, which changes every time the model re-plans.
"""

from __future__ import annotations

import hashlib
import json

from google.protobuf.message import Message

# `json.dumps(..., ensure_ascii=False)`'s encoder, made once (dumps builds one a call when given
# an argument): the same text, so the same ids.
_frame = json.JSONEncoder(ensure_ascii=False).encode


def action_id(tenant: str, run_id: str, step_id: str, tool: str, scope: str) -> str:
    # JSON framing keeps ("a|b", "c") and ("a", "b|c") apart.
    material = _frame([tenant, run_id, step_id, tool, scope])
    return "act_" + hashlib.sha256(material.encode()).hexdigest()[:32]


def fingerprint(payload: Message) -> str:
    """Hash of the normalised payload in protobuf's deterministic serialisation."""
    digest = hashlib.sha256(payload.DESCRIPTOR.full_name.encode() + b"\0")
    digest.update(payload.SerializeToString(deterministic=True))
    return "sha256:" + digest.hexdigest()


def provider_key(action: str, generation: int) -> str:
    """The idempotency key sent to the provider: stable across retries, restarts and
    replicas; a new generation only after an operator-granted bypass."""
    return f"effectgate-{action}-g{generation}"


def scope_action_id(tenant: str, tool: str, scope: str) -> str:
    """The action id of a tool with `unique = "scope"`: one action per (tenant, tool, scope),
    whatever the run and step (a run and step are never empty, so this never names an action of
    another tool's key)."""
    return action_id(tenant, "", "", tool, scope)
