"""`effectgate audit verify --config PATH [--since 24h] [-o table|json|yaml]`: walks every tenant's
audit-trail hash chain in the store (store/trail/check.py) and names the first broken row.

It reads the store directly, not through a gateway: the check must not trust the process whose
writes it checks, it covers every tenant (a principal of the RPC API sees one), and it works
while no gateway runs. (An auditor without database access checks an exported trail instead:
ListEvents hands out each event's link, docs/security.md.) Exit status 0 when the chain holds,
1 when a row breaks it, 2 when the store keeps no chain.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

from effectgate.client.cli import render
from effectgate.gateway.config import load_config, parse_duration
from effectgate.gateway.core import SystemClock
from effectgate.gateway.runtime.configured import open_configured_store
from effectgate.gateway.store import Verdict, verify_chain


async def run_verify(config_path: str, since: str, output: str) -> int:
    config = load_config(config_path)
    start = SystemClock()() - parse_duration(since, "--since") if since else 0.0
    store = open_configured_store(config)
    await store.open()
    try:
        verdict = await verify_chain(store, start)
    except NotImplementedError:
        print("effectgate audit verify: this store keeps no audit trail", file=sys.stderr)
        return 2
    finally:
        await store.close()
    show(verdict, since, output)
    return 1 if verdict.broken else 0


def report(verdict: Verdict, since: str) -> dict[str, Any]:
    return {
        "verified": verdict.broken is None,
        "since": since or "the chain's start",
        "tenants": verdict.tenants,
        "rows": verdict.rows,
        "unchained_rows": verdict.unchained,
        "broken": asdict(verdict.broken) if verdict.broken else None,
    }


def show(verdict: Verdict, since: str, output: str) -> None:
    if output in ("json", "yaml"):
        render.dump(report(verdict, since), output)
        return
    scope = f" since {since}" if since else ""
    older = f"; {verdict.unchained} rows from before the chain are not covered" if verdict.unchained else ""
    b = verdict.broken
    if b is None:
        print(render.printable(f"chain verified{scope}: {verdict.rows} rows in {verdict.tenants} tenants{older}"))
        return
    print(render.printable(f"chain BROKEN at row {b.seq} (tenant {b.tenant}, position {b.n}): {b.problem}"))
    print(render.printable(f"  expected {b.expected or '(empty)'}"))
    print(render.printable(f"  found    {b.found or '(empty)'}"))
