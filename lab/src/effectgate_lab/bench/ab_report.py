"""The A/B run's summary (`bench.ab`): each figure's median and range over the runs, the floors
beside each row, and the ratios the targets judge, computed within each run (same minutes) and
then summarised (median, min-max)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import Any

Fig = dict[str, Any]
ECHO, DIRECT = "bare grpc.aio", "stripe simulator"  # the floors' setups
FSYNC = "4 KiB page, fsync"  # the storage floor's (runs recorded before it have none)
# (name, limit, higher is better): the targets of issue 35 (docs/benchmarks.md).
TARGETS: dict[str, tuple[float, bool]] = {
    "replay calls/s / echo, c=1": (0.85, True),
    "replay calls/s / echo, c=16": (0.85, True),
    "new: gateway CPU per action / base's, c=1": (0.70, False),
    "new: gateway CPU per action / base's, c=16": (0.70, False),
    "new p50 - direct p50, in echo round trips, c=1": (4.0, False),
    "new calls/s / min(echo, direct), c=16": (0.2, True),
    "new calls/s drop with OTLP tracing on, c=1": (0.15, False),
    "new calls/s drop with OTLP tracing on, c=16": (0.15, False),
    "replay calls/s drop with OTLP tracing on, c=1": (0.15, False),
    "replay calls/s drop with OTLP tracing on, c=16": (0.15, False),
}


def _find(figures: Iterable[Fig], path: str, setup: str, c: int) -> Fig | None:
    return next((f for f in figures if f["path"] == path and f["setup"] == setup and f["concurrency"] == c), None)


def spread(values: Iterable[float | None]) -> dict[str, float] | None:
    got = [v for v in values if v is not None]
    if not got:
        return None
    return {"median": statistics.median(got), "min": min(got), "max": max(got), "n": len(got)}


def _per_run(doc: dict[str, Any], fn: Callable[[list[Fig]], float | None]) -> list[float | None]:
    return [fn(figures) for figures in doc["runs"]]


def _ratio(a: Fig | None, b: Fig | None, key: str) -> float | None:
    return None if a is None or b is None or not b[key] else float(a[key]) / float(b[key])


def _of(
    path: str, setup: str, over_path: str, over_setup: str, c: int, key: str
) -> Callable[[list[Fig]], float | None]:
    def ratio(figures: list[Fig]) -> float | None:
        return _ratio(_find(figures, path, setup, c), _find(figures, over_path, over_setup, c), key)

    return ratio


def ratios(doc: dict[str, Any], side: str) -> dict[str, list[float | None]]:
    """Per run: the target ratios of `side` (against the floors and the base of the same run)."""
    out: dict[str, list[float | None]] = {}
    for c in (1, 16):
        out[f"replay calls/s / echo, c={c}"] = _per_run(doc, _of("replay", side, "echo", ECHO, c, "per_s"))
    for c in (1, 16):
        name = f"new: gateway CPU per action / base's, c={c}"
        out[name] = _per_run(doc, _of("new", side, "new", "base", c, "server_cpu_us"))

    def overhead(f: list[Fig]) -> float | None:
        new, direct, echo = (
            _find(f, "new", side, 1),
            _find(f, "direct", DIRECT, 1),
            _find(f, "echo", ECHO, 1),
        )
        return (
            None
            if new is None or direct is None or echo is None
            else (new["p50_ms"] - direct["p50_ms"]) / echo["p50_ms"]
        )

    def floor(f: list[Fig]) -> float | None:
        new, direct, echo = (
            _find(f, "new", side, 16),
            _find(f, "direct", DIRECT, 16),
            _find(f, "echo", ECHO, 16),
        )
        return (
            None
            if new is None or direct is None or echo is None
            else new["per_s"] / min(direct["per_s"], echo["per_s"])
        )

    def over_floor(f: list[Fig]) -> float | None:
        new, direct, echo, fsync = (
            _find(f, "new", side, 1),
            _find(f, "direct", DIRECT, 1),
            _find(f, "echo", ECHO, 1),
            _find(f, "fsync", FSYNC, 1),
        )
        if new is None or direct is None or echo is None or fsync is None:
            return None
        return float(new["p50_ms"] / (direct["p50_ms"] + echo["p50_ms"] + 2 * fsync["p50_ms"]))

    out["new p50 - direct p50, in echo round trips, c=1"] = _per_run(doc, overhead)
    out["new calls/s / min(echo, direct), c=16"] = _per_run(doc, floor)
    if any(_find(run, "fsync", FSYNC, 1) for run in doc["runs"]):
        out["new p50 / (direct + echo + 2 fsync) p50s, c=1"] = _per_run(doc, over_floor)
    return out


def tracing_drops(doc: dict[str, Any], untraced: str, traced: str) -> dict[str, list[float | None]]:
    out: dict[str, list[float | None]] = {}
    for path in ("new", "replay"):
        for c in (1, 16):

            def drop(f: list[Fig], path: str = path, c: int = c) -> float | None:
                off, on = _find(f, path, untraced, c), _find(f, path, traced, c)
                return None if off is None or on is None else 1 - on["per_s"] / off["per_s"]

            out[f"{path} calls/s drop with OTLP tracing on, c={c}"] = _per_run(doc, drop)
    return out


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    keys = [(f["path"], f["setup"], f["concurrency"]) for f in doc["runs"][0]]
    figures = []
    for path, setup, c in keys:
        found = [_find(run, path, setup, c) for run in doc["runs"]]
        row: dict[str, Any] = {"path": path, "setup": setup, "concurrency": c}
        for key in ("per_s", "p50_ms", "p99_ms", "server_cpu_us"):
            row[key] = spread(f[key] for f in found if f is not None)
        row["per_s_over_echo"] = spread(_per_run(doc, _of(path, setup, "echo", ECHO, c, "per_s")))
        row["p50_over_direct"] = spread(_per_run(doc, _of(path, setup, "direct", DIRECT, c, "p50_ms")))
        figures.append(row)
    sides = [s["name"] for s in doc["options"]["sides"]]
    per_side = {side: {k: spread(v) for k, v in ratios(doc, side).items()} for side in sides}
    traced = [s["name"] for s in doc["options"]["sides"] if "OTLP" in s["env"]]
    for name in traced:
        per_side[name] |= {k: spread(v) for k, v in tracing_drops(doc, "this", name).items()}
    return {"figures": figures, "ratios": per_side}


def show(s: dict[str, float] | None, fmt: str) -> str:
    """A spread as `median [min-max]`, or `n/a`."""
    if s is None:
        return "n/a"
    return f"{s['median']:{fmt}} [{s['min']:{fmt}}-{s['max']:{fmt}}]"


def render(doc: dict[str, Any]) -> str:
    meta, opts, summ = doc["machine"], doc["options"], doc["summary"]
    load = ", ".join(f"{x:.2f}" for x in meta["load_average"])
    sides = ", ".join(f"{s['name']} = {s['tree']}{' ' + str(s['env']) if s['env'] else ''}" for s in opts["sides"])
    lines = [
        f"commit {meta['commit']} against base {meta.get('base_commit', '?')}, {meta['cores']} cores, "
        f"load average {load} at start, {meta['at']}",
        f"{opts['runs']} runs x {opts['rounds']} interleaved rounds, {opts['n']} calls per figure and run, "
        f"gateways at --log-level {opts['log_level']}, SQLite FULL; sides: {sides}",
        "median [min-max] over the runs; calls/s / echo and p50 / direct are taken within each run",
        "",
        "{:7} {:17} {:>3} {:>22} {:>22} {:>22} {:>20} {:>20}".format(
            "path", "setup", "c", "calls/s", "p50 ms", "server CPU us/call", "calls/s / echo", "p50 / direct"
        ),
    ]
    for row in summ["figures"]:
        lines.append(
            f"{row['path']:7} {row['setup']:17} {row['concurrency']:3d} {show(row['per_s'], '.0f'):>22}"
            f" {show(row['p50_ms'], '.2f'):>22} {show(row['server_cpu_us'], '.0f'):>22}"
            f" {show(row['per_s_over_echo'], '.2f'):>20} {show(row['p50_over_direct'], '.2f'):>20}"
        )
    lines += ["", "ratios (within each run), median [min-max]; targets:"]
    for side, found in summ["ratios"].items():
        lines.append(f"  {side}:")
        for name, s in found.items():
            if s is None:
                continue
            verdict = ""
            if name not in TARGETS:  # a figure to read the targets by, not one itself
                lines.append(f"    {name:50} {show(s, '.2f'):>22}")
                continue
            limit, higher = TARGETS[name]
            if side != "base" or "base's" not in name:
                met = s["median"] >= limit if higher else s["median"] <= limit
                verdict = f"(target {'>=' if higher else '<='} {limit:g}) {'met' if met else 'MISSED'}"
            lines.append(f"    {name:50} {show(s, '.2f'):>22}  {verdict}")
    return "\n".join(lines)
