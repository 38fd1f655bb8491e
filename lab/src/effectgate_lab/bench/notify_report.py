"""The summary of `bench.notify_down`: each side's figures as median and range over the runs, the
ratios b/a taken within each run (same minutes) and then summarised, and what became of (b)'s
backlog: held while down, delivered after."""

from __future__ import annotations

from typing import Any

from effectgate_lab.bench.ab_report import show, spread

Fig = dict[str, Any]
KEYS = ("per_s", "p50_ms", "p99_ms", "server_cpu_us")


def _find(figures: list[Fig], path: str, setup: str, c: int) -> Fig | None:
    return next((f for f in figures if f["path"] == path and f["setup"] == setup and f["concurrency"] == c), None)


def _ratio(b: Fig | None, a: Fig | None, key: str) -> float | None:
    if a is None or b is None or a[key] is None or b[key] is None or not a[key]:
        return None
    return float(b[key]) / float(a[key])


def delivered(run: dict[str, Any]) -> bool:
    after = run["notify"]["after"]
    return bool(after["delivered"] >= run["notify"]["seeded"] and after["pending_after"] == 0)


def key(side: str) -> str:
    """A side's short name: `b` of "b: notify down"."""
    return side.partition(":")[0]


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """Per path and concurrency: each side's figures, and each other side's over the first's
    (`b/a`; `a2/a` for the control: what two like gateways differ by in the same minutes)."""
    sides = doc["options"]["sides"]
    base = sides[0]
    runs = [r["figures"] for r in doc["runs"]]
    rows = []
    for path, c in dict.fromkeys((f["path"], f["concurrency"]) for f in runs[0]):
        row: dict[str, Any] = {"path": path, "concurrency": c}
        for side in sides:
            found = [_find(r, path, side, c) for r in runs]
            row[key(side)] = {k: spread(f[k] for f in found if f is not None) for k in KEYS}
        for side in sides[1:]:
            row[f"{key(side)}/{key(base)}"] = {
                k: spread(_ratio(_find(r, path, side, c), _find(r, path, base, c), k) for r in runs) for k in KEYS
            }
        rows.append(row)
    return {
        "figures": rows,
        "notify": [r["notify"] for r in doc["runs"]],
        "delivered_after": all(delivered(r) for r in doc["runs"]),
    }


def render(doc: dict[str, Any]) -> str:
    meta, opts, summ = doc["machine"], doc["options"], doc["summary"]
    start = ", ".join(f"{x:.2f}" for x in meta["load_average"])
    end = ", ".join(f"{x:.2f}" for x in meta.get("load_average_end", ()))
    sides = opts["sides"]
    a, b = sides[:2]
    names = [key(s) for s in sides] + [f"{key(s)}/{key(a)}" for s in sides[1:]]
    lines = [
        f"commit {meta['commit']}, {meta['cores']} cores, load average {start} at start, {end} at end, {meta['at']}",
        f"{opts['runs']} runs x {opts['rounds']} interleaved rounds, {opts['n']} new actions (and their replays) "
        f"per side, concurrency and run; SQLite FULL, gateways at --log-level {opts['log_level']}",
        f"({a}) no [[notify]]; ({b}) + a webhook sink that reads and never answers (timeout {opts['timeout']:g}s), "
        f"{opts['seed']} approval_waiting notifications failing and retrying"
        + (f"; ({sides[2]}) a second gateway like (a)" if len(sides) > 2 else ""),
        "median [min-max] over the runs; ratios are taken within each run; the sides' order in a round turns"
        " from run to run",
        "",
        "{:7} {:>3} {:>5} {:>20} {:>20} {:>20} {:>22}".format(
            "path", "c", "side", "calls/s", "p50 ms", "p99 ms", "gateway CPU us/call"
        ),
    ]
    for row in summ["figures"]:
        for name in names:
            s, fmts = row[name], (".3f",) * 4 if "/" in name else (".0f", ".2f", ".2f", ".0f")
            lines.append(
                f"{row['path']:7} {row['concurrency']:3d} {name:>5}"
                + "".join(f" {show(s[k], f):>{w}}" for k, f, w in zip(KEYS, fmts, (20, 20, 20, 22), strict=True))
            )
    lines += ["", "(b)'s backlog, per run:"]
    for i, facts in enumerate(summ["notify"], 1):
        after = facts["after"]
        lines.append(
            f"  run {i}: {facts['pending_before']} pending before measuring (most attempts"
            f" {facts['most_attempts_before']}); {facts['attempts_held_during']} attempts held by the down sink while"
            f" measuring, {facts['pending_after_measuring']} still pending (most attempts"
            f" {facts['most_attempts_after_measuring']}); sink up: {after['delivered']}/{facts['seeded']} delivered"
            f" ({after['approval_waiting']} approval_waiting, signatures checked) in {after['seconds']:.1f}s,"
            f" {after['pending_after']} pending and {after['failed_after']} failed after"
        )
    lines.append(f"delivered after: {'yes' if summ['delivered_after'] else 'NO'}")
    return "\n".join(lines)
