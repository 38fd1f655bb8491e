"""The prose findings of a recorded run, generated from its rows so that every sentence in the
findings of docs/chaos.md is a number of the committed run (nothing typed by hand)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from effectgate_lab.chaos.model import ENGINES, KEYED, Result
from effectgate_lab.chaos.reporting.report import fmt_rate, summarize
from effectgate_lab.chaos.reporting.tables import CONDITIONS, methods_in, part, sweep_runs


def _by_method(results: Sequence[Result]) -> dict[str, dict[str, Any]]:
    return {r["method"]: r for r in summarize(results, ("method",))}


def _study(results: Sequence[Result], margin: float) -> list[str]:
    runs = part(results, "headline")
    if not runs:
        return []
    rows = _by_method(runs)
    n = next(iter(rows.values()))["episodes"]
    lines = [
        f"- Study setting (single agent, activate_customer and record_invoice, 3 levels; {n} episodes "
        "per method, each its own fault stream), duplicates: "
        + "; ".join(f"{m} {fmt_rate(rows[m], 'duplicates')}" for m in methods_in(runs))
        + "."
    ]
    cells = summarize(runs, ("level", "scenario", "method"))
    wrapper = [c for c in cells if c["method"] == "wrapper"]
    zero = [f"{c['scenario']} {c['level']}" for c in wrapper if c["duplicates"] == 0]
    if wrapper:
        lines.append(
            f"- The fair wrapper (normalized-payload key, first check after {margin:g} x the lag) had 0 duplicates "
            f"in {len(zero)} of {len(wrapper)} task x level cells"
            + (f" ({', '.join(zero)})" if zero else "")
            + f"; effectgate in {sum(c['duplicates'] == 0 for c in cells if c['method'] == 'effectgate')} of "
            f"{len(wrapper)}."
        )
    return lines


def _conditions(results: Sequence[Result]) -> list[str]:
    lines = []
    for name, title in CONDITIONS.items():
        rows = _by_method(part(results, name))
        if "wrapper" not in rows or "effectgate" not in rows:
            continue
        w, e = rows["wrapper"], rows["effectgate"]
        s = rows.get("stable_key")
        lines.append(
            f"- First write {title}: wrapper {w['duplicates']}/{w['episodes']} duplicates, "
            f"{w['false_success']} false successes; "
            + (f"stable_key {s['duplicates']} duplicates, {s['false_success']} false successes; " if s else "")
            + f"effectgate {e['duplicates']} duplicates, {e['false_success']} false successes, "
            f"{e['unknown_final']} left unknown."
        )
    return lines


def _behaviours(results: Sequence[Result]) -> list[str]:
    runs = part(results, "behaviours")
    rows = summarize(runs, ("behaviour", "method"))
    out = []
    for behaviour in dict.fromkeys(r["behaviour"] for r in rows):
        if behaviour == "single":
            continue
        cells = {r["method"]: r for r in rows if r["behaviour"] == behaviour}
        caused = [f"{m} {cells[m]['duplicates_behaviour_caused']}" for m in methods_in(runs) if m in cells]
        n = next(iter(cells.values()))["episodes"]
        out.append(f"- `{behaviour}` ({n} episodes per method), duplicates the behaviour caused: {', '.join(caused)}.")
    return out


def _sweep(results: Sequence[Result]) -> list[str]:
    runs = sweep_runs(results)
    rows = summarize(runs, ("method", "margin"))
    out = []
    for method in methods_in(runs):
        mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["margin"])
        broken = [f"{r['margin']:g}" for r in mine if r["duplicates"]]
        out.append(f"{method} at {', '.join(broken) or 'none'}")
    if not out:
        return []
    return ["- Lag sweep (wait or window ÷ lag), ratios where a method duplicated: " + "; ".join(out) + "."]


def _unique_scope(results: Sequence[Result]) -> list[str]:
    """effectgate with `unique = "scope"` against itself without, on the same fault streams."""
    runs = part(results, "unique_scope")
    if not runs:
        return []
    mine = {r["behaviour"]: r for r in summarize(runs, ("behaviour",))}
    before = {
        r["behaviour"]: r
        for r in summarize(part(results, "behaviours"), ("behaviour", "method"))
        if r["method"] == "effectgate"
    }
    cells = []
    for behaviour, r in mine.items():
        was = before.get(behaviour)
        cells.append(
            f"`{behaviour}` {r['duplicates']}/{r['episodes']} duplicates, {r['false_success']} false successes"
            + (f" (without it {was['duplicates']}/{was['episodes']})" if was else "")
        )
    return [
        '- effectgate with `unique = "scope"` on its tools (one action per business object): ' + "; ".join(cells) + "."
    ]


def _sweep_auto(results: Sequence[Result]) -> list[str]:
    """effectgate's learned window against its fixed one, ratio by ratio, on the same streams."""
    runs = part(results, "sweep_auto")
    if not runs:
        return []
    fixed = {
        r["margin"]: r for r in summarize(sweep_runs(results), ("margin", "method")) if r["method"] == "effectgate"
    }
    cells = []
    for r in summarize(runs, ("margin",)):
        was = fixed.get(r["margin"])
        cells.append(
            f"{r['margin']:g} x lag {r['duplicates']}/{r['episodes']} duplicates, {r['false_success']} false successes"
            + (f" (window fixed at it: {was['duplicates']}/{was['episodes']})" if was else "")
        )
    return [
        '- Lag sweep with `consistency_window = "auto"` (the ratio is only the declared window): '
        + "; ".join(cells)
        + "."
    ]


def _mcp(results: Sequence[Result]) -> list[str]:
    runs = part(results, "mcp")
    if not runs:
        return []
    rows = _by_method(runs)
    n = next(iter(rows.values()))["episodes"]
    return [
        f"- Through an MCP upstream without keys (`mcp_create_issue`, 3 levels; {n} episodes per method), duplicates: "
        + "; ".join(f"{m} {fmt_rate(rows[m], 'duplicates')}" for m in methods_in(runs))
        + f"; effectgate false successes {rows['effectgate']['false_success'] if 'effectgate' in rows else '—'}."
    ]


def _effectgate_duplicates(results: Sequence[Result]) -> list[str]:
    """Every cell where effectgate itself duplicated, so no reader has to find them."""
    mine = [r for r in results if r.method == "effectgate"]
    if not mine:
        return []
    rows = summarize(mine, ("part", "level", "scenario", "behaviour", "margin"))
    cells = [
        f"{r['part']} {r['level']} {r['scenario']} {r['behaviour']} at {r['margin']:g} x lag "
        f"({r['duplicates']}/{r['episodes']})"
        for r in rows
        if r["duplicates"]
    ]
    total = sum(r.duplicate for r in mine)
    return [f"- effectgate duplicated in {total} of {len(mine)} episodes: " + ("; ".join(cells) or "none") + "."]


def _faults_off(results: Sequence[Result], meta: dict[str, Any]) -> list[str]:
    effects = sum(r.truth.effects for r in results)
    off = sum(r.effects_faults_off for r in results)
    if not effects:
        return []
    when = "faults never stopped (--crash)" if meta.get("crash") else "faults stop when the agents have answered"
    return [f"- Effects made by writes after the faults stopped: {off} of {effects} ({when})."]


def _engines(results: Sequence[Result]) -> list[str]:
    """Each engine over the whole run, at the providers with keys and without."""
    out = []
    for method in (m for m in ENGINES if any(r.method == m for r in results)):
        mine = [r for r in results if r.method == method]
        sides = []
        for label, runs in (
            ("with keys", [r for r in mine if r.episode.scenario in KEYED]),
            ("without keys", [r for r in mine if r.episode.scenario not in KEYED]),
        ):
            if runs:
                (row,) = summarize(runs, ())
                sides.append(
                    f"{label} {fmt_rate(row, 'duplicates')} duplicates, {row['false_success']} false successes, "
                    f"{row['false_failure']} false failures"
                )
        out.append(f"- {method}, every part: " + "; ".join(sides) + ".")
    return out


def summary(results: Sequence[Result], meta: dict[str, Any]) -> str:
    lines = [
        *_study(results, float(meta.get("margin", 1.5))),
        *_engines(results),
        *_behaviours(results),
        *_conditions(results),
        *_sweep(results),
        *_unique_scope(results),
        *_sweep_auto(results),
        *_mcp(results),
        *_effectgate_duplicates(results),
        *_faults_off(results, meta),
    ]
    return "\n".join(lines)
