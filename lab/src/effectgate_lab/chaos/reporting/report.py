"""Episodes -> rows (the JSON schema) and rows -> Markdown tables.

A row aggregates the episodes of one group; every rate is a count out of `episodes` with its
Wilson 95 % interval (`*_ci95`, fractions). Times to a definite answer count an episode that
never got one as infinite (p99 null = "never" for at least 1 % of episodes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from effectgate_lab.chaos.model import METHODS, Result, Told
from effectgate_lab.chaos.reporting.stats import percentile, wilson

KEYS = ("part", "level", "scenario", "behaviour", "margin", "method")
RATES = ("duplicates", "success_at_fault_stop", "success_final", "false_success", "false_failure", "unknown_final")
ORDER = {
    name: i
    for i, name in enumerate(
        (
            *METHODS,
            *("low", "medium", "high"),
            *("single", "replan_paraphrase", "resume", "approval_twice", "subagents_same_step"),
            "subagents_diff_step",
        )
    )
}


def key_of(r: Result, field: str) -> Any:
    if field == "method":
        return r.method
    if field == "first_fault":
        return r.first_fault
    return getattr(r.episode, field)


def caused_by_behaviour(results: Sequence[Result]) -> set[int]:
    """ids of duplicates a behaviour caused: the `single` twin (same method, part, scenario,
    level, margin and seed, hence the same fault stream) made no duplicate."""
    twins = {
        (r.method, r.episode.part, r.episode.scenario, r.episode.level, r.episode.margin, r.episode.seed): r
        for r in results
        if r.episode.behaviour == "single"
    }
    out = set()
    for r in results:
        e = r.episode
        if r.duplicate and e.behaviour != "single":
            twin = twins.get((r.method, e.part, e.scenario, e.level, e.margin, e.seed))
            if twin is not None and not twin.duplicate:
                out.add(id(r))
    return out


def _rate(row: dict[str, Any], name: str, k: int, n: int) -> None:
    row[name] = k
    row[f"{name}_ci95"] = [round(x, 4) for x in wilson(k, n)]


def summarize(results: Iterable[Result], by: Sequence[str] = KEYS, lag: float = 0.0) -> list[dict[str, Any]]:
    results = list(results)
    behavioural = caused_by_behaviour(results)
    groups: dict[tuple[Any, ...], list[Result]] = {}
    for r in results:
        groups.setdefault(tuple(key_of(r, k) for k in by), []).append(r)
    rows = []
    for key, group in groups.items():
        n = len(group)
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        if "margin" in by and lag:
            row["wait_s"] = round(row["margin"] * lag, 4)
        row["episodes"] = n
        _rate(row, "duplicates", sum(r.duplicate for r in group), n)
        _rate(row, "success_at_fault_stop", sum(r.success_at_stop for r in group), n)
        _rate(row, "success_final", sum(r.success for r in group), n)
        _rate(row, "false_success", sum(r.false_success for r in group), n)
        _rate(row, "false_failure", sum(r.false_failure for r in group), n)
        _rate(row, "unknown_final", sum(r.unknown_final for r in group), n)
        row["unknown_at_fault_stop"] = sum(r.told is Told.UNKNOWN for r in group)
        row["duplicates_behaviour_caused"] = sum(id(r) in behavioural for r in group)
        row["duplicates_fault_caused"] = row["duplicates"] - row["duplicates_behaviour_caused"]
        times = [math.inf if r.definite_after is None else r.definite_after for r in group]
        for q in (50, 99):
            t = percentile(times, q)
            row[f"time_to_definite_p{q}_s"] = None if math.isinf(t) else round(t, 3)
        row["effects"] = sum(r.truth.effects for r in group)
        row["effects_faults_off"] = sum(r.effects_faults_off for r in group)
        row["calls"] = sum(r.calls for r in group)
        rows.append(row)
    return sorted(rows, key=lambda row: [_sort_key(row[k]) for k in by])


def _sort_key(value: Any) -> tuple[int, str]:
    if isinstance(value, float):
        return (0, f"{value:09.3f}")
    return (ORDER.get(value, 99), str(value))


def fmt_rate(row: dict[str, Any], name: str, counts: bool = True) -> str:
    k, n = row[name], row["episodes"]
    lo, hi = row[f"{name}_ci95"]
    text = f"{100 * k / n:.0f}% [{100 * lo:.0f}-{100 * hi:.0f}]"
    return f"{k}/{n} = {text}" if counts else text


def fmt_count(row: dict[str, Any], name: str) -> str:
    """A count with its rate's Wilson interval, compact: `0 [0-7%]`."""
    lo, hi = row[f"{name}_ci95"]
    return f"{row[name]} [{100 * lo:.0f}-{100 * hi:.0f}%]"


def fmt_time(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f}s"


def table(header: Sequence[str], lines: Iterable[Sequence[str]]) -> str:
    """A Markdown table with padded columns: readable on a terminal, stable in a diff."""
    body = [list(header), ["---"] * len(header), *(list(line) for line in lines)]
    widths = [max(len(line[i]) for line in body) for i in range(len(header))]
    return "\n".join("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |" for line in body)
