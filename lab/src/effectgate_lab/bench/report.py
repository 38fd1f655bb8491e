"""Printing a run: the figures, their ratios to the echo floor and the direct call, the targets
the gateway is held to, and the same as JSON (with the machine it ran on)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effectgate_lab.bench.load import Figure
from effectgate_lab.bench.run import Options, Results, scale_label


@dataclass(frozen=True)
class Target:
    name: str
    value: float | None
    limit: float | None  # None: a figure reported and compared across runs, with no target
    higher_is_better: bool

    @property
    def met(self) -> bool | None:
        if self.value is None or self.limit is None:
            return None
        return self.value >= self.limit if self.higher_is_better else self.value <= self.limit

    def line(self) -> str:
        shown = "n/a" if self.value is None else f"{self.value:.2f}"
        if self.limit is None:
            return f"{self.name:62} {shown:>8} (reported, no target)"
        sign = ">=" if self.higher_is_better else "<="
        verdict = {True: "met", False: "MISSED", None: "not measured"}[self.met]
        return f"{self.name:62} {shown:>8} (target {sign} {self.limit:g})  {verdict}"


def _ratio(a: Figure | None, b: Figure | None, attr: str) -> float | None:
    if a is None or b is None:
        return None
    return float(getattr(a, attr)) / float(getattr(b, attr))


def targets(results: Results, opts: Options) -> list[Target]:
    full = "sqlite FULL, "
    echo1, echo16 = results.find("echo", 1), results.find("echo", 16)
    direct1, direct16 = results.find("direct", 1), results.find("direct", 16)
    new16 = results.find("new", 16, full)
    out = [
        Target(
            "replay calls/s / echo calls/s, c=1", _ratio(results.find("replay", 1, full), echo1, "per_s"), 0.8, True
        ),
        Target(
            "replay calls/s / echo calls/s, c=16", _ratio(results.find("replay", 16, full), echo16, "per_s"), 0.8, True
        ),
    ]
    # SQLite FULL only: it is the setup measured in the same rounds as the floors.
    new1 = results.find("new", 1, full)
    overhead = None
    if new1 and direct1 and echo1:
        overhead = (new1.p50_ms - direct1.p50_ms) / echo1.p50_ms
    # The former target of 3 echo round trips at c=1 was withdrawn: the figure is kept to compare runs.
    out.append(Target("new p50 overhead over direct, in echo round trips, c=1", overhead, None, False))
    floor = min(echo16.per_s, direct16.per_s) if echo16 and direct16 else None
    out.append(
        Target(
            "new calls/s at c=16 / min(echo, direct), SQLite FULL",
            new16.per_s / floor if new16 and floor else None,
            0.2,
            True,
        )
    )
    for path in ("new", "replay"):
        for c in (1, 16):
            at_small = results.find(path, c, f"scale: sqlite FULL, {scale_label(opts.small)} ")
            at_big = results.find(path, c, f"scale: sqlite FULL, {scale_label(opts.scale)} ")
            change = None if at_small is None or at_big is None else 1 - at_big.per_s / at_small.per_s
            out.append(
                Target(f"{path} calls/s drop at {opts.scale} vs {opts.small} stored, c={c}", change, 0.10, False)
            )
    for path in ("new", "replay"):
        for c in (1, 16):
            off, on = results.find(path, c, "tracing off"), results.find(path, c, "tracing on")
            drop = None if off is None or on is None else 1 - on.per_s / off.per_s
            out.append(Target(f"{path} calls/s drop with OTLP tracing on, c={c}", drop, 0.10, False))
    for c in (1, 16):
        host, on_store = results.find("new", c, "host clock"), results.find("new", c, "store clock")
        drop = None if host is None or on_store is None else 1 - on_store.per_s / host.per_s
        out.append(
            Target(f"new calls/s drop with the store's clock vs the host's (PostgreSQL), c={c}", drop, 0.05, False)
        )
    for store in ("sqlite FULL", "postgres"):
        for c in (1, 16):
            off, on = results.find("new", c, f"limits off: {store}"), results.find("new", c, f"limits on: {store}")
            if off is None or on is None:
                continue
            ratio = on.per_s / off.per_s
            out.append(Target(f"new calls/s with limits / without, {store}, c={c}", ratio, 0.75, True))
    growth = results.rss.get("growth")
    out.append(Target(f"RSS growth over {opts.rss_requests} requests", growth, 0.10, False))
    return out


def machine() -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "commit": commit or "unknown",
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def render(results: Results, opts: Options, meta: dict[str, Any]) -> str:
    load = ", ".join(f"{x:.2f}" for x in meta["load_average"])
    header = (
        "path",
        "setup",
        "c",
        "calls",
        "p50 ms",
        "p99 ms",
        "calls/s",
        "p50/echo",
        "p50/direct",
        "calls/s / echo",
        "server CPU us/call",
    )
    lines = [
        f"commit {meta['commit']}, {meta['cores']} cores, load average {load} at start",
        "",
        "{:10} {:36} {:>3} {:>7} {:>8} {:>8} {:>8} {:>9} {:>10} {:>14} {:>18}".format(*header),
    ]
    for fig in results.figures:
        echo, direct = results.find("echo", fig.concurrency), results.find("direct", fig.concurrency)
        p50_echo = f"{fig.p50_ms / echo.p50_ms:8.1f}x" if echo else ""
        p50_direct = f"{fig.p50_ms / direct.p50_ms:9.1f}x" if direct else ""
        per_s_echo = f"{fig.per_s / echo.per_s:13.2f}x" if echo else ""
        cpu = "" if fig.server_cpu_us is None else f"{fig.server_cpu_us:.0f}"
        lines.append(
            f"{fig.path:10} {fig.setup:36} {fig.concurrency:3d} {fig.calls:7d} {fig.p50_ms:8.2f} {fig.p99_ms:8.2f}"
            f" {fig.per_s:8.0f} {p50_echo:>9} {p50_direct:>10} {per_s_echo:>14} {cpu:>18}"
        )
    if results.rss:
        rss = results.rss
        lines += [
            "",
            f"RSS over {rss['requests']} requests (c=16, 1 new : 9 replays): "
            f"{rss['rss_after_warmup_mb']:.1f} MB after {rss['warmup_requests']} -> {rss['rss_end_mb']:.1f} MB "
            f"at the end ({rss['growth'] * 100:+.1f} %; {rss['growth_second_half'] * 100:+.1f} % over the second half, "
            f"after the bounded caches filled), {rss['per_s']:.0f} calls/s",
        ]
    if results.preload_s:
        lines += [
            "",
            "preloaded through the store API: " + ", ".join(f"{k}: {v:.1f} s" for k, v in results.preload_s.items()),
        ]
    lines += ["", "targets:"] + [t.line() for t in targets(results, opts)]
    lines += [f"note: {n}" for n in results.notes]
    return "\n".join(lines)


def to_json(results: Results, opts: Options, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "machine": meta,
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(opts).items() if k != "gateway_env"},
        "figures": [f.to_json() for f in results.figures],
        "rss": results.rss,
        "preload_s": results.preload_s,
        "targets": [{"name": t.name, "value": t.value, "limit": t.limit, "met": t.met} for t in targets(results, opts)],
        "notes": results.notes,
    }


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=2) + "\n")
