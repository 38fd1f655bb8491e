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

    def against_floors(
        c: int, fn: Callable[[Fig, Fig, Fig, Fig | None], float | None]
    ) -> Callable[[list[Fig]], float | None]:
        """`fn(new, direct, echo, fsync)` of one run at `c`; None when a figure is missing (fsync
        is only measured at c=1, and runs recorded before it have none)."""

        def ratio(f: list[Fig]) -> float | None:
            new, direct, echo = _find(f, "new", side, c), _find(f, "direct", DIRECT, c), _find(f, "echo", ECHO, c)
            if new is None or direct is None or echo is None:
                return None
            return fn(new, direct, echo, _find(f, "fsync", FSYNC, c))

        return ratio

    def over_floor(new: Fig, direct: Fig, echo: Fig, fsync: Fig | None) -> float | None:
        if fsync is None:
            return None
        return float(new["p50_ms"] / (direct["p50_ms"] + echo["p50_ms"] + 2 * fsync["p50_ms"]))

    out["new p50 - direct p50, in echo round trips, c=1"] = _per_run(
        doc, against_floors(1, lambda new, direct, echo, _: (new["p50_ms"] - direct["p50_ms"]) / echo["p50_ms"])
    )
    out["new calls/s / min(echo, direct), c=16"] = _per_run(
        doc, against_floors(16, lambda new, direct, echo, _: new["per_s"] / min(direct["per_s"], echo["per_s"]))
    )
    if any(_find(run, "fsync", FSYNC, 1) for run in doc["runs"]):
        out["new p50 / (direct + echo + 2 fsync) p50s, c=1"] = _per_run(doc, against_floors(1, over_floor))
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


def meets(name: str, s: dict[str, float]) -> bool:
    """Whether the median of a spread meets its target (TARGETS)."""
    limit, higher = TARGETS[name]
    return s["median"] >= limit if higher else s["median"] <= limit


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
                verdict = f"(target {'>=' if higher else '<='} {limit:g}) {'met' if meets(name, s) else 'MISSED'}"
            lines.append(f"    {name:50} {show(s, '.2f'):>22}  {verdict}")
    return "\n".join(lines)


# The targets table of docs/benchmarks.md: (row, the ratios it reads); two ratios share a row.
# The page's typography is escaped here (ruff keeps look-alike characters out of the source).
DASH = "\u2013"
TABLE_ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("replay \u2265 0.85\u00d7 echo, c=1", ("replay calls/s / echo, c=1",)),
    ("replay \u2265 0.85\u00d7 echo, c=16", ("replay calls/s / echo, c=16",)),
    ("gateway CPU per new action \u2264 0.70\u00d7 the base's, c=1", ("new: gateway CPU per action / base's, c=1",)),
    ("gateway CPU per new action \u2264 0.70\u00d7 the base's, c=16", ("new: gateway CPU per action / base's, c=16",)),
    (
        "new action p50 \u2212 direct \u2264 4 echo round trips, c=1",
        ("new p50 - direct p50, in echo round trips, c=1",),
    ),
    ("new calls/s at c=16 \u2265 0.2\u00d7 min(echo, direct)", ("new calls/s / min(echo, direct), c=16",)),
    (
        "OTLP tracing on costs \u2264 15 % of calls/s (new, c=1 / c=16)",
        ("new calls/s drop with OTLP tracing on, c=1", "new calls/s drop with OTLP tracing on, c=16"),
    ),
    (
        "the same for replays (c=1 / c=16)",
        ("replay calls/s drop with OTLP tracing on, c=1", "replay calls/s drop with OTLP tracing on, c=16"),
    ),
)


def _md(s: dict[str, float] | None) -> str:
    return "n/a" if s is None else f"{s['median']:.2f} [{s['min']:.2f}{DASH}{s['max']:.2f}]"


def _met(name: str, s: dict[str, float] | None) -> str:
    if s is None:
        return "n/a"
    if meets(name, s):
        return "yes"
    limit = TARGETS[name][0]
    # A median that rounds to the limit without meeting it says so.
    return f"no ({s['median']:.3f})" if f"{s['median']:.2f}" == f"{limit:.2f}" else "no"


def targets_table(doc: dict[str, Any]) -> str:
    """The targets as a Markdown table: `this` side's median [min-max] over the runs, the base's
    in the same runs, and whether the median meets the target (tracing: the traced side)."""
    ratios_of = doc["summary"]["ratios"]
    traced = next((s["name"] for s in doc["options"]["sides"] if "OTLP" in s["env"]), None)
    this, base = ratios_of.get("this", {}), ratios_of.get("base", {})
    lines = ["| target | this tree | base, same runs | met |", "| --- | --- | --- | --- |"]
    for row, names in TABLE_ROWS:
        side = ratios_of.get(traced, {}) if "tracing" in names[0] else this
        own = " / ".join(_md(side.get(n)) for n in names)
        if "tracing" in names[0] or "base's" in names[0]:
            theirs = "\u2014" if "tracing" in names[0] else "1"
        else:
            theirs = " / ".join(_md(base.get(n)) for n in names)
        met = " / ".join(_met(n, side.get(n)) for n in names)
        lines.append(f"| {row} | {own} | {theirs} | {met} |")
    return "\n".join(lines)


def doc_block(doc: dict[str, Any], name: str) -> str:
    """The body of docs/benchmarks.md's `<!-- bench:NAME -->` block: `run` (the rendered run) or
    `targets` (the table)."""
    if name == "run":
        return f"```\n{render(doc)}\n```"
    if name == "targets":
        return targets_table(doc)
    raise KeyError(f"no bench block named {name!r}")
