"""The named tables of a recorded run, as Markdown: what `effectgate chaos report` prints and what
docs/chaos.md embeds between `<!-- chaos:NAME -->` markers (see docs_blocks.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from effectgate_lab.chaos.model import METHODS, Result
from effectgate_lab.chaos.reporting.engines import engines
from effectgate_lab.chaos.reporting.report import fmt_count, fmt_rate, fmt_time, summarize, table
from effectgate_lab.chaos.reporting.stats import mcnemar_exact

# The study's published duplicate-effect rates (%), baseline and verified wrapper, 25 seeds per
# cell: "Verified Tool Calls Improve LLM Agent Reliability Under Non-Atomic Failures" (2026),
# arXiv:2608.02645. It publishes no low/medium figures for record_invoice.
STUDY: dict[tuple[str, str], dict[str, int]] = {
    ("activate_customer", "low"): {"baseline": 20, "wrapper": 0},
    ("activate_customer", "medium"): {"baseline": 44, "wrapper": 16},
    ("activate_customer", "high"): {"baseline": 72, "wrapper": 20},
    ("record_invoice", "high"): {"baseline": 76, "wrapper": 20},
}
CONDITIONS = {
    "partial_finishing": "half-done, finishes after the lag",
    "partial_stuck": "half-done, never finishes",
    "timeout_after_commit": "timeout, response lost after commit",
    "timeout_after_commit_unseen": "timeout, response lost after commit, write not visible yet",
    "timeout_before_commit": "timeout, request lost before commit",
}


def part(results: Sequence[Result], name: str) -> list[Result]:
    return [r for r in results if r.episode.part == name]


def methods_in(results: Sequence[Result]) -> list[str]:
    present = {r.method for r in results}
    return [m for m in METHODS if m in present]


def meta_line(meta: dict[str, Any], results: Sequence[Result]) -> str:
    load = meta.get("load_average_end") or meta.get("load_average", [])
    return (
        f"Recorded run: commit `{meta.get('commit') or '?'}`{' (dirty tree)' if meta.get('dirty') else ''}, "
        f"{meta.get('cores')} cores, load average {'/'.join(str(x) for x in meta.get('load_average', []))} "
        f"at start and {'/'.join(str(x) for x in load)} at the end, `--parallel {meta.get('parallel')}`, "
        f"provider lag {meta.get('lag_s')} s, every method's wait or window {meta.get('margin')} x lag, "
        f"{len(results)} episodes in {meta.get('wall_seconds')} s"
        f"{', with --crash' if meta.get('crash') else ''}."
    )


def headline(results: Sequence[Result], name: str = "headline") -> str:
    """One row per level, task and method; `study` is the published figure where there is one."""
    rows = summarize(part(results, name), ("level", "scenario", "method"))
    lines = []
    for row in rows:
        study = STUDY.get((row["scenario"], row["level"]), {}).get(row["method"])
        lines.append(
            [
                row["level"],
                row["scenario"],
                row["method"],
                fmt_rate(row, "duplicates"),
                *(["—" if study is None else f"{study}%"] if name == "headline" else []),
                fmt_rate(row, "success_at_fault_stop", counts=False),
                fmt_rate(row, "success_final", counts=False),
                fmt_count(row, "false_success"),
                fmt_count(row, "false_failure"),
                fmt_count(row, "unknown_final"),
                f"{fmt_time(row['time_to_definite_p50_s'])} / {fmt_time(row['time_to_definite_p99_s'])}",
            ]
        )
    header = (
        "level",
        "task",
        "method",
        "duplicates (95% CI)",
        *(["study"] if name == "headline" else []),
        "success at fault stop",
        "success after reconcile",
        "false success",
        "false failure",
        "unknown after reconcile",
        "definite answer p50 / p99",
    )
    return table(header, lines)


def pooled(results: Sequence[Result], name: str) -> str:
    """One part pooled over its levels and scenarios, one row per method."""
    rows = summarize(part(results, name), ("method",))
    header = ("method", "episodes", "duplicates (95% CI)", "success after reconcile", "false success", "unknown")
    lines = [
        [
            r["method"],
            str(r["episodes"]),
            fmt_rate(r, "duplicates"),
            fmt_rate(r, "success_final", counts=False),
            fmt_count(r, "false_success"),
            fmt_count(r, "unknown_final"),
        ]
        for r in rows
    ]
    return table(header, lines)


def paired(results: Sequence[Result]) -> str:
    """Each method against effectgate on the same fault streams (scenario, level, seed)."""
    runs = part(results, "headline")
    by = {(r.method, r.episode.scenario, r.episode.level, r.episode.seed): r.duplicate for r in runs}
    lines = []
    for method in methods_in(runs):
        if method == "effectgate":
            continue
        # Only episodes effectgate ran too (a run of other methods alone has no pairs).
        pairs = [
            (dup, by[("effectgate", *k[1:])])
            for k, dup in by.items()
            if k[0] == method and ("effectgate", *k[1:]) in by
        ]
        only_m = sum(a and not b for a, b in pairs)
        only_e = sum(b and not a for a, b in pairs)
        both = sum(a and b for a, b in pairs)
        p = mcnemar_exact(only_m, only_e)
        lines.append([method, str(len(pairs)), str(both), str(only_m), str(only_e), f"{p:.2g}"])
    header = ("method vs effectgate", "paired episodes", "both duplicated", "only method", "only effectgate", "exact p")
    return table(header, lines)


def fault_kinds(results: Sequence[Result]) -> str:
    runs = part(results, "headline")
    methods = methods_in(runs)
    rows = summarize(runs, ("first_fault", "method"))
    kinds = sorted({r["first_fault"] for r in rows}, key=lambda k: (k != "none", k))
    cell = {(r["first_fault"], r["method"]): r for r in rows}
    lines = []
    for kind in kinds:
        n = next(cell[(kind, m)]["episodes"] for m in methods if (kind, m) in cell)
        lines.append(
            [kind, str(n), *(fmt_count(cell[(kind, m)], "duplicates") if (kind, m) in cell else "—" for m in methods)]
        )
    return table(("first write's fault", "episodes", *methods), lines)


UNIQUE = 'effectgate, unique = "scope"'
AUTO = 'effectgate, window "auto"'


def _labelled(r: dict[str, Any] | None) -> str:
    if r is None:
        return "—"
    f, b = r["duplicates_fault_caused"], r["duplicates_behaviour_caused"]
    return fmt_count(r, "duplicates") + (f" ({f}f + {b}b)" if r["duplicates"] else "")


def behaviours(results: Sequence[Result]) -> str:
    """The behaviours part, and beside it effectgate with `unique = "scope"` (part unique_scope:
    the same level, tasks and fault streams) where that part ran the behaviour."""
    runs = part(results, "behaviours")
    methods = methods_in(runs)
    rows = summarize(runs, ("scenario", "behaviour", "method"))
    cell = {(r["scenario"], r["behaviour"], r["method"]): r for r in rows}
    unique = {
        (r["scenario"], r["behaviour"]): r for r in summarize(part(results, "unique_scope"), ("scenario", "behaviour"))
    }
    lines = []
    for scenario, behaviour in dict.fromkeys((r["scenario"], r["behaviour"]) for r in rows):
        out = [scenario, behaviour, str(cell[(scenario, behaviour, methods[0])]["episodes"])]
        out += [_labelled(cell.get((scenario, behaviour, m))) for m in methods]
        if unique:
            out.append(_labelled(unique.get((scenario, behaviour))))
        lines.append(out)
    return table(("task", "behaviour", "episodes", *methods, *([UNIQUE] if unique else [])), lines)


def conditions(results: Sequence[Result]) -> str:
    lines = []
    for name, title in CONDITIONS.items():
        for r in summarize(part(results, name), ("method",)):
            lines.append(
                [
                    title,
                    r["method"],
                    str(r["episodes"]),
                    fmt_rate(r, "duplicates"),
                    fmt_count(r, "false_success"),
                    fmt_count(r, "false_failure"),
                    fmt_count(r, "unknown_final"),
                    fmt_rate(r, "success_final", counts=False),
                ]
            )
    header = (
        "first write",
        "method",
        "episodes",
        "duplicates (95% CI)",
        "false success",
        "false failure",
        "unknown after reconcile",
        "success after reconcile",
    )
    return table(header, lines)


def sweep_runs(results: Sequence[Result]) -> list[Result]:
    """The sweep part, plus the headline's episodes at the sweep's level on the sweep's seeds (the
    same fault streams) as its point at the default margin."""
    runs = part(results, "sweep")
    if not runs:
        return []
    level, seeds = runs[0].episode.level, {r.episode.seed for r in runs}
    margins = {r.episode.margin for r in runs}
    same = [r for r in part(results, "headline") if r.episode.level == level and r.episode.seed in seeds]
    return runs + [r for r in same if r.episode.margin not in margins]


def sweep(results: Sequence[Result]) -> str:
    """Every method at each ratio of its wait or window to the lag, and beside them effectgate
    with a learned window (part sweep_auto: the same level, tasks and fault streams), where the
    ratio is only the window it declares until it has learned one."""
    runs = sweep_runs(results)
    methods = methods_in(runs)
    rows = summarize(runs, ("margin", "method"))
    cell = {(r["margin"], r["method"]): r for r in rows}
    auto = {r["margin"]: r for r in summarize(part(results, "sweep_auto"), ("margin",))}
    lines = []
    for margin in sorted({r["margin"] for r in rows} | set(auto)):
        n = next((cell[(margin, m)]["episodes"] for m in methods if (margin, m) in cell), 0) or auto[margin]["episodes"]
        out = [f"{margin:g}", str(n)]
        for r in [*(cell.get((margin, m)) for m in methods), *([auto.get(margin)] if auto else [])]:
            out.append("—" if r is None else f"{fmt_count(r, 'duplicates')} dup, {r['unknown_final']} unk")
        lines.append(out)
    return table(("wait or window ÷ lag", "episodes", *methods, *([AUTO] if auto else [])), lines)


def mcp(results: Sequence[Result]) -> str:
    """The study's setting through an MCP upstream without keys (part mcp)."""
    return headline(results, "mcp")


def keyed(results: Sequence[Result]) -> str:
    """The study's setting at the provider that honours idempotency keys (part keyed)."""
    return headline(results, "keyed")


TABLES: dict[str, Callable[[Sequence[Result]], str]] = {
    "headline": headline,
    "keyed": keyed,
    "engines": engines,
    "paired": paired,
    "fault_kinds": fault_kinds,
    "behaviours": behaviours,
    "conditions": conditions,
    "sweep": sweep,
    "mcp": mcp,
}
