"""`effectgate audit --config PATH --since 24h [-o json]`: one drift-audit pass (background/drift.py)
against the configured adapters and store, printed as a readable summary or as JSON. Exit status
0 with no finding, 1 with findings, 2 when a provider could not be read."""

from __future__ import annotations

import json
import sys

from effectgate.adapters import AdapterError
from effectgate.gateway.background import audit
from effectgate.gateway.config import load_config, parse_duration
from effectgate.gateway.core import BoundTool, SystemClock
from effectgate.gateway.runtime.parts import build_adapters, close_adapters, open_configured_store, tenants_of


async def run_audit(config_path: str, since: str, output: str) -> int:
    config = load_config(config_path)
    lookback = parse_duration(since, "--since")
    adapters = build_adapters(config)
    try:
        store = open_configured_store(config)
        await store.open()
        try:
            tools = {name: BoundTool(tool, adapters[tool.adapter]) for name, tool in config.tools.items()}
            now = SystemClock()()
            try:
                report = await audit(store, tools, adapters, tenants_of(config), now - lookback, now)
            except AdapterError as exc:
                print(f"effectgate audit: a provider read failed: {exc.message}", file=sys.stderr)
                return 2
        finally:
            await store.close()
    finally:
        await close_adapters(adapters)
    print(json.dumps(report.to_json(), indent=2) if output == "json" else report.summary())
    return 1 if report.findings else 0
