"""The text of `bench.peers`: each path's figures at each concurrency, and ratios taken within the
run (same minutes): each path's p50 over the direct call's, and each engine's over effectgate's
on the same kind of store."""

from __future__ import annotations

from typing import Any

Fig = dict[str, Any]
TAG = "bench-peers"  # docs/benchmarks.md's block: <!-- bench-peers:run -->
# Whom each path is compared with on the same store (effectgate's own rows: the direct call).
SAME_STORE = {
    "restate": "effectgate sqlite",
    "dbos sqlite": "effectgate sqlite",
    "dbos postgres": "effectgate postgres",
}


def _cpu(f: Fig) -> str:
    return "—" if f.get("server_cpu_us") is None else f"{f['server_cpu_us']:.0f}"


def render(doc: dict[str, Any]) -> str:
    meta, opts = doc["machine"], doc["options"]
    start = ", ".join(f"{x:.2f}" for x in meta["load_average"])
    end = ", ".join(f"{x:.2f}" for x in meta.get("load_average_end", ()))
    lines = [
        f"commit {meta['commit']}, {meta['cores']} cores, load average {start} at start, {end} at end",
        f"{opts['n']} new effects per path and concurrency, in {opts['rounds']} interleaved rounds",
        "",
        "{:20} {:>3} {:>9} {:>8} {:>8} {:>9} {:>12} {:>13}".format(
            "path", "c", "effects/s", "p50 ms", "p99 ms", "CPU us", "p50÷direct", "÷effectgate"
        ),
    ]
    figures: list[Fig] = doc["figures"]
    for c in dict.fromkeys(f["concurrency"] for f in figures):
        at = {f["setup"]: f for f in figures if f["concurrency"] == c}
        direct = at.get("direct")
        for name, f in at.items():
            over_direct = f"{f['p50_ms'] / direct['p50_ms']:.2f}" if direct and name != "direct" else ""
            peer = at.get(SAME_STORE.get(name, ""))
            over_gate = f"{f['p50_ms'] / peer['p50_ms']:.2f}" if peer else ""
            lines.append(
                f"{name:20} {c:3d} {f['per_s']:9.0f} {f['p50_ms']:8.2f} {f['p99_ms']:8.2f} {_cpu(f):>9}"
                f" {over_direct:>12} {over_gate:>13}"
            )
    lines += [
        "",
        "CPU us: the serving process's CPU per effect (the simulator for direct, the gateway, the DBOS",
        "worker, the Restate server without its SDK worker). ÷effectgate: the engine's p50 over",
        "effectgate's on the same kind of store (Restate's own log against effectgate on SQLite).",
    ]
    return "\n".join(lines)


def block(doc: dict[str, Any]) -> str:
    """The committed run as docs/benchmarks.md embeds it."""
    return f"```\n{render(doc)}\n```"
