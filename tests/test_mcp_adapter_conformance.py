"""The adapter conformance suite (effectgate.adapters.testing) over the `mcp` adapter, against
both upstream MCP simulators (a mail server that dedups on a key, an issue tracker that does
not) on both transports (streamable HTTP on loopback, stdio children)."""

from __future__ import annotations

from pathlib import Path

import pytest

from effectgate.adapters.testing import CHECKS, Check
from tests.mcp_upstream_targets import NAMES, McpTarget, start_target

# Every check over HTTP; over stdio (a Python child per session, seconds each) the checks whose
# transport behaviour differs: a lost answer is the process dying, a refusal, a wrong credential.
STDIO_CHECKS = ("lost_response_is_verified", "definitive_refusal", "no_secret_leaks")
# A tools/call has no HTTP status: the 5xx-after-the-write and 409 checks have no MCP fault to
# inject (a lost answer and an isError that applied nothing are covered by the other checks).
HTTP_ONLY = ("error_after_commit_is_ambiguous", "conflict_is_not_a_refusal")
CASES = [(n, c) for n in NAMES if n.endswith("-http") for c in CHECKS if c not in HTTP_ONLY] + [
    (n, c) for n in NAMES if n.endswith("-stdio") for c in STDIO_CHECKS
]


@pytest.mark.parametrize(("name", "check"), CASES, ids=[f"{n}-{c}" for n, c in CASES])
async def test_conformance(name: str, check: str, tmp_path: Path) -> None:
    target: McpTarget = await start_target(name, tmp_path)
    try:
        run: Check = CHECKS[check]
        await run(target)
    finally:
        await target.stop()
