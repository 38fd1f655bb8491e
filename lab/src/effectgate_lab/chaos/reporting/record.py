"""A recorded run: the machine it ran on, every episode, and the rows (the JSON document).

`effectgate chaos --json FILE` writes one; `effectgate chaos report FILE` renders it again. The
episodes are stored column-wise (one short list per episode) so a full run stays small enough
to commit; the rows are derived from them and stored too, for readers of the JSON.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from effectgate_lab.chaos.model import Episode, Result, Told, Truth
from effectgate_lab.chaos.reporting.report import summarize

SCHEMA = 1
COLUMNS = (
    "method",
    "part",
    "level",
    "scenario",
    "behaviour",
    "margin",
    "seed",
    "told_at_fault_stop",
    "told_final",
    "effects",
    "complete_effects",
    "latency_s",
    "definite_after_s",
    "calls",
    "first_fault",
    "effects_faults_off",
    "notes",
)
NOTES_KEPT = 6  # notes are kept for the episodes worth reading: a duplicate, false or unknown answer


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def machine(parallel: int) -> dict[str, Any]:
    """What a reader needs to judge timing-dependent numbers."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "commit": _git("rev-parse", "--short=12", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "cores": cores,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "parallel": parallel,
        "python": platform.python_version(),
        "platform": sys.platform,
    }


def episode_row(r: Result) -> list[Any]:
    e = r.episode
    interesting = r.duplicate or r.false_success or r.false_failure or r.unknown_final
    return [
        r.method,
        e.part,
        e.level,
        e.scenario,
        e.behaviour,
        e.margin,
        e.seed,
        r.told.value,
        r.told_final.value,
        r.truth.effects,
        r.truth.complete,
        round(r.latency, 3),
        None if r.definite_after is None else round(r.definite_after, 3),
        r.calls,
        r.first_fault,
        r.effects_faults_off,
        r.notes[:NOTES_KEPT] if interesting else [],
    ]


def result_of(values: list[Any]) -> Result:
    v = dict(zip(COLUMNS, values, strict=True))
    episode = Episode.draw(v["part"], v["seed"], v["level"], v["scenario"], v["behaviour"], v["margin"])
    return Result(
        method=v["method"],
        episode=episode,
        told=Told(v["told_at_fault_stop"]),
        told_final=Told(v["told_final"]),
        latency=v["latency_s"],
        definite_after=v["definite_after_s"],
        truth=Truth(v["effects"], v["complete_effects"]),
        calls=v["calls"],
        first_fault=v["first_fault"],
        effects_faults_off=v["effects_faults_off"],
        notes=list(v["notes"]),
    )


def document(results: list[Result], meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "meta": meta,
        "rows": summarize(results, lag=float(meta.get("lag_s", 0.0))),
        "episode_columns": list(COLUMNS),
        "episodes": [episode_row(r) for r in results],
    }


def results_of(doc: dict[str, Any]) -> list[Result]:
    if doc.get("schema") != SCHEMA or doc.get("episode_columns") != list(COLUMNS):
        raise ValueError("not a chaos run recorded by this version (schema or columns differ)")
    return [result_of(values) for values in doc["episodes"]]


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def save(doc: dict[str, Any], path: Path) -> None:
    """One row and one episode per line: small, and readable in a diff."""

    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    parts = []
    for name, value in doc.items():
        if isinstance(value, list) and value and isinstance(value[0], dict | list):
            parts.append(f"{dump(name)}: [\n" + ",\n".join(dump(v) for v in value) + "\n]")
        else:
            parts.append(f"{dump(name)}: {json.dumps(value, ensure_ascii=False)}")
    path.write_text("{\n" + ",\n".join(parts) + "\n}\n")
