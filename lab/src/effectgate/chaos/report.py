"""Turns episodes into the table: rates per method x level (x scenario), and the JSON document."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from effectgate.chaos.model import Result, Told

COLUMNS = (
    ("episodes", "episodes"),
    ("success", "task success"),
    ("duplicates", "duplicate effects"),
    ("false_successes", "false successes"),
    ("unknown_at_stop", "unknown when faults stop"),
    ("unknown_after", "unknown after reconcile"),
    ("p50", "p50 latency"),
    ("p99", "p99 latency"),
)
RATES = ("success", "duplicates", "false_successes", "unknown_at_stop", "unknown_after")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summarize(results: Iterable[Result], by: Sequence[str]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, ...], list[Result]] = {}
    for r in results:
        fields = {"method": r.method, "level": r.episode.level, "scenario": r.episode.scenario}
        fields["behaviour"] = r.episode.behaviour
        groups.setdefault(tuple(fields[k] for k in by), []).append(r)
    rows = []
    for key, group in groups.items():
        latencies = [r.latency for r in group]
        rows.append(
            {
                **dict(zip(by, key, strict=True)),
                "episodes": len(group),
                "success": sum(r.success for r in group),
                "duplicates": sum(r.duplicate for r in group),
                "false_successes": sum(r.false_success for r in group),
                "false_failures": sum(r.false_failure for r in group),
                "unknown_at_stop": sum(r.told is Told.UNKNOWN for r in group),
                "unknown_after": sum(r.told_final is Told.UNKNOWN for r in group),
                "effects": sum(r.truth.effects for r in group),
                "p50": round(percentile(latencies, 50), 3),
                "p99": round(percentile(latencies, 99), 3),
            }
        )
    return rows


def _cell(row: dict[str, Any], key: str) -> str:
    if key in RATES:
        return f"{100 * row[key] / max(row['episodes'], 1):.0f}%"
    if key in ("p50", "p99"):
        return f"{row[key]:.2f}s"
    return str(row[key])


def markdown(rows: list[dict[str, Any]], by: Sequence[str]) -> str:
    """A Markdown table: readable on a terminal, pasteable into the README."""
    order = {"direct": 0, "wrapper": 1, "effectgate": 2, "low": 0, "medium": 1, "high": 2, "replan": 0}
    keys = [k for k in by if k != "method"] + (["method"] if "method" in by else [])
    rows = sorted(rows, key=lambda r: [(order.get(r[k], 9), r[k]) for k in keys])
    header = [*keys, *(title for _, title in COLUMNS)]
    lines = [header, ["---"] * len(header)]
    lines += [[str(r[k]) for k in keys] + [_cell(r, key) for key, _ in COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |" for line in lines)


def document(results: list[Result], meta: dict[str, Any]) -> dict[str, Any]:
    return {
        **meta,
        "by_method_level": summarize(results, ("method", "level")),
        "by_method_level_scenario": summarize(results, ("method", "level", "scenario")),
        "by_method_behaviour": summarize(results, ("method", "behaviour")),
        "episodes": [r.to_json() for r in results],
    }
