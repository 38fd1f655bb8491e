"""What an upstream's answer to a `tools/call` means for the adapter contract.

- no session could be opened, or the server did not know the session on the call and on its one
  re-send on a new session (a 404 for the session id: no tool ran): nothing was written
  (`NoEffectError`, `CredentialsRefused` when the upstream refused the credentials);
- the request was written and the session broke, or no answer came in time: `AmbiguousError`,
  never "no effect" (the server may have applied it before the connection went);
- a JSON-RPC error answer on a live session: the protocol errors a server raises before running
  a tool (parse, invalid request, unknown method, invalid params) are definitive; any other code is
  ambiguous (so is one that came with a 404 not about the session: `Lost`). A session or transport
  error is never definitive;
- an `isError` result: `no_effect_when` → `NoEffectError` (`RateLimited` with `retry_after`),
  else `refused_when` → `DefinitiveError`, else ambiguous (a server that wraps a REST API often
  reports the API's own timeout as a tool error, after the effect).
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from effectgate.adapters.base import (
    AdapterError,
    AmbiguousError,
    CredentialsRefused,
    DefinitiveError,
    JsonDict,
    NoEffectError,
    RateLimited,
)
from effectgate.adapters.mcp.connection import Lost, NoAnswer, NotSent
from effectgate.adapters.mcp.rules import Rule
from effectgate.adapters.redact import scrub, scrub_json

# Raised by a server before the tool runs: the call applied nothing.
PROTOCOL_REFUSALS = frozenset({types.PARSE_ERROR, types.INVALID_REQUEST, types.METHOD_NOT_FOUND, types.INVALID_PARAMS})
MAX_PAUSE = 300.0


def document(result: types.CallToolResult, secrets: frozenset[str]) -> JsonDict:
    """The result as the rules see it: structuredContent, else the first text block as JSON,
    else {"text": …}; scrubbed of every secret."""
    doc: Any = result.structured_content
    text = next((b.text for b in result.content if isinstance(b, types.TextContent)), "")
    if doc is None:
        try:
            doc = json.loads(text) if text else {}
        except ValueError:
            doc = {"text": text}
    if not isinstance(doc, dict):
        doc = {"value": doc}
    cleaned = scrub_json(doc, secrets)
    return cleaned if isinstance(cleaned, dict) else {}


def summary(result: types.CallToolResult, doc: JsonDict, secrets: frozenset[str]) -> str:
    text = next((b.text for b in result.content if isinstance(b, types.TextContent)), "")
    return scrub(text or json.dumps(doc), secrets, limit=200)


def transport_error(exc: NotSent | Lost | NoAnswer, what: str) -> AdapterError:
    if isinstance(exc, NotSent):
        if exc.refused:
            return CredentialsRefused(f"{what}: {exc}; nothing was sent")
        return NoEffectError(f"{what}: {exc}; nothing was sent", code="connect")
    if isinstance(exc, NoAnswer):
        return AmbiguousError(f"{what}: {exc}; the effect may have happened", code="timeout")
    return AmbiguousError(f"{what}: {exc}; the effect may have happened", code="no_answer")


def rpc_error(code: int, message: str, what: str, secrets: frozenset[str]) -> AdapterError:
    text = f"{what}: JSON-RPC error {code}: {scrub(message, secrets, limit=200)}"
    if code in PROTOCOL_REFUSALS:
        return DefinitiveError(text, code=f"jsonrpc_{abs(code)}")
    return AmbiguousError(text, code=f"jsonrpc_{abs(code)}")


def tool_error(
    activation: JsonDict,
    text: str,
    what: str,
    *,
    no_effect_when: Rule | None,
    refused_when: Rule | None,
    retry_after: Rule | None,
) -> AdapterError:
    message = f"{what}: the tool answered an error: {text}"
    if no_effect_when is not None and no_effect_when.holds(activation):
        pause = _pause(retry_after, activation)
        if pause is not None:
            return RateLimited(message + "; nothing was applied", retry_after=pause, details={"retry_after": pause})
        return NoEffectError(message + "; nothing was applied", code="tool_refused_for_now")
    if refused_when is not None and refused_when.holds(activation):
        return DefinitiveError(message, code="tool_refused")
    return AmbiguousError(message + "; the effect may have happened", code="tool_error")


def _pause(rule: Rule | None, activation: JsonDict) -> float | None:
    if rule is None:
        return None
    try:
        value = rule.evaluate(activation)
    except Exception:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return min(max(float(value), 0.0), MAX_PAUSE)
