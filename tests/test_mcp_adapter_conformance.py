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
CASES = [(n, c) for n in NAMES if n.endswith("-http") for c in CHECKS] + [
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
