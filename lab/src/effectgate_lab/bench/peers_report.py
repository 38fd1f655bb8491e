"""The text of `bench.peers`: each path's figures at each concurrency, and ratios taken within the
run (same minutes): each path's p50 over the direct call's and over effectgate's on each store."""

from __future__ import annotations

from typing import Any

Fig = dict[str, Any]
TAG = "bench-peers"  # docs/benchmarks.md's block: <!-- bench-peers:run -->
GATEWAYS = ("effectgate sqlite", "effectgate postgres")


def _cpu(f: Fig) -> str:
    return "—" if f.get("server_cpu_us") is None else f"{f['server_cpu_us']:.0f}"


def _over(f: Fig, base: Fig | None) -> str:
    return f"{f['p50_ms'] / base['p50_ms']:.2f}" if base and base is not f else ""


def render(doc: dict[str, Any]) -> str:
    meta, opts = doc["machine"], doc["options"]
    start = ", ".join(f"{x:.2f}" for x in meta["load_average"])
    end = ", ".join(f"{x:.2f}" for x in meta.get("load_average_end", ()))
    lines = [
        f"commit {meta['commit']}, {meta['cores']} cores, load average {start} at start, {end} at end",
        f"{opts['n']} new effects per path and concurrency, in {opts['rounds']} interleaved rounds",
        "",
        "{:20} {:>3} {:>9} {:>8} {:>8} {:>7} {:>8} {:>10} {:>10}".format(
            "path", "c", "effects/s", "p50 ms", "p99 ms", "CPU us", "÷direct", "÷eg sqlite", "÷eg pg"
        ),
    ]
    figures: list[Fig] = doc["figures"]
    for c in dict.fromkeys(f["concurrency"] for f in figures):
        at = {f["setup"]: f for f in figures if f["concurrency"] == c}
        direct = at.get("direct")
        sqlite, pg = (at.get(name) for name in GATEWAYS)
        for name, f in at.items():
            ratios = ["", "", ""] if f is direct else [_over(f, direct), _over(f, sqlite), _over(f, pg)]
            lines.append(
                f"{name:20} {c:3d} {f['per_s']:9.0f} {f['p50_ms']:8.2f} {f['p99_ms']:8.2f} {_cpu(f):>7}"
                f" {ratios[0]:>8} {ratios[1]:>10} {ratios[2]:>10}"
            )
    lines += [
        "",
        "CPU us: the serving process's CPU per effect (the simulator for direct, the gateway, the DBOS",
        "worker, the Restate server without its SDK worker). ÷: the path's p50 over the direct call's,",
        "over effectgate's on SQLite FULL and over effectgate's on PostgreSQL, in the same rounds.",
    ]
    return "\n".join(lines)


def block(doc: dict[str, Any]) -> str:
    """The committed run as docs/benchmarks.md embeds it."""
    return f"```\n{render(doc)}\n```"
