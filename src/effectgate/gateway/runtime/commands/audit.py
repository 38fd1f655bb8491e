"""`effectgate audit --config PATH --since 24h [-o table|wide|json|yaml]`: one drift-audit pass
(background/drift.py) against the configured adapters and store, printed like the other commands
print: a summary and a table of findings (`wide`: with what differs), or the report as JSON or
YAML. `--since` is printed as given. Exit status 0 with no finding, 1 with findings, 2 when a
provider could not be read."""

from __future__ import annotations

import sys
from typing import Any

from rich.table import Table
from rich.text import Text

from effectgate.adapters import AdapterError
from effectgate.client.cli import render
from effectgate.gateway.background import DriftReport, audit
from effectgate.gateway.config import load_config, parse_duration
from effectgate.gateway.core import BoundTool, SystemClock
from effectgate.gateway.runtime.configured import build_adapters, close_adapters, open_configured_store, tenants_of


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
                report.since_text = since
            except AdapterError as exc:
                print(f"effectgate audit: a provider read failed: {exc.message}", file=sys.stderr)
                return 2
        finally:
            await store.close()
    finally:
        await close_adapters(adapters)
    show(report, output)
    return 1 if report.findings else 0


def show(report: DriftReport, output: str) -> None:
    if output in ("json", "yaml"):
        render.dump(report.to_json(), output)
        return
    print(render.printable(report.summary().splitlines()[0]))
    if report.findings:
        render.show(_table(report, wide=output == "wide"))


def _table(report: DriftReport, *, wide: bool) -> Table:
    columns = ["FINDING", "ADAPTER", "OBJECT", "ACTION", "TOOL"] + (["DETAIL"] if wide else [])
    grid = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    for name in columns:
        grid.add_column(name, no_wrap=name != "DETAIL")
    for f in report.findings:
        cells: list[Any] = [f.kind, f.adapter, f.object_id, f.action_id, f.tool] + ([f.detail] if wide else [])
        grid.add_row(*(Text(render.printable(str(c or "-"))) for c in cells))
    return grid
