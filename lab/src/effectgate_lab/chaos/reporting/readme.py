"""The README's first screen, rendered from the committed run: what the run shows for effectgate as
shipped, then the promise's limits in one sentence, every figure with its Wilson 95 % interval.

"As shipped" is every effectgate episode outside the cells that show a limit on purpose
(`Part.expected_to_break`: subagents given their own step ids on a tool without
`unique = "scope"`, a fixed window shorter than the provider's lag).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from effectgate_lab.chaos.model import ENGINES, KEYED, Result
from effectgate_lab.chaos.reporting.report import summarize
from effectgate_lab.chaos.reporting.stats import wilson
from effectgate_lab.chaos.runner import Part, all_parts

_RIVAL = "retries_only"  # the agent that retries the provider itself, the commonest way in the field


def _row(results: Sequence[Result]) -> dict[str, Any]:
    (row,) = summarize(results, ())
    return row


def _pct(x: float) -> str:
    return f"{100 * x:.1f}".removesuffix(".0") if x < 0.1 else f"{100 * x:.0f}"


def fmt_rate(row: dict[str, Any], name: str) -> str:
    """`k of n [lo-hi %]` (the Wilson 95 % interval), one decimal below 10 % so that 0 of 1200 is not `0-0`."""
    k, n = row[name], row["episodes"]
    lo, hi = wilson(k, n)
    return f"{k} of {n} [{_pct(lo)}-{_pct(hi)} %]"


def readme(results: Sequence[Result], meta: dict[str, Any]) -> str:
    parts = {p.name: p for p in all_parts()}
    window = str(meta.get("window", ""))
    mine = [r for r in results if r.method == "effectgate"]
    if not mine:
        return ""

    def edge(r: Result) -> bool:
        e = r.episode
        return parts.get(e.part, Part(e.part, (), ())).expected_to_break(e.behaviour, e.margin, window)

    shipped = _row([r for r in mine if not edge(r)])
    diff = [r for r in mine if r.episode.behaviour == "subagents_diff_step"]
    diff_off = [r for r in diff if edge(r)]
    diff_on = [r for r in diff if not edge(r)]
    short = [r for r in mine if r.episode.margin < 1 and r.episode.behaviour != "subagents_diff_step"]
    short_fixed = [r for r in short if edge(r)]
    short_auto = [r for r in short if not edge(r)]
    rival = [r for r in results if r.method == _RIVAL]
    text = (
        f"**Measured** in the committed chaos run ([docs/chaos.md](docs/chaos.md): {len(results)} episodes, "
        f"commit `{meta.get('commit', '?')}`; lost answers, 5xx, timeouts, read lag, partial writes, re-plans, "
        "resumes, double approvals and subagents injected; effects counted in the provider's own ledger; "
        "95 % intervals in brackets): "
        f"through effectgate, **duplicates {fmt_rate(shipped, 'duplicates')}** and **false successes "
        f"{fmt_rate(shipped, 'false_success')}**"
    )
    if rival:
        rate = fmt_rate(_row(rival), "duplicates")
        text += f"; the same agents retrying the provider themselves duplicated in {rate}"
    text += "." + _engines(results)
    limits = []
    if diff_off:
        on = f", with it {fmt_rate(_row(diff_on), 'duplicates')}" if diff_on else ""
        limits.append(
            "two actions the runtime names differently are two actions (subagents given their own step ids for "
            f'one piece of work: without `unique = "scope"` {fmt_rate(_row(diff_off), "duplicates")}{on})'
        )
    if short_fixed:
        auto = f'; `"auto"` learns it: {fmt_rate(_row(short_auto), "duplicates")}' if short_auto else ""
        limits.append(
            "a fixed consistency window shorter than the provider's lag may take a stale read for absence "
            f"({fmt_rate(_row(short_fixed), 'duplicates')}{auto})"
        )
    if limits:
        text += " **Its limits:** " + "; and ".join(limits) + " — [docs/states.md](docs/states.md)."
    return text


def _engines(results: Sequence[Result]) -> str:
    """The engines' sentence: their step key holds where the provider honours it, not elsewhere."""
    mine = [r for r in results if r.method in ENGINES]
    if not mine:
        return ""
    keyed = [r for r in mine if r.episode.scenario in KEYED]
    keyless = [r for r in mine if r.episode.scenario not in KEYED]
    parts = []
    if keyless:
        row = _row(keyless)
        parts.append(
            f"at the providers without keys duplicated in {fmt_rate(row, 'duplicates')} "
            f"(false successes {fmt_rate(row, 'false_success')})"
        )
    if keyed:
        parts.append(f"at the provider with keys in {fmt_rate(_row(keyed), 'duplicates')}")
    return (
        " Restate and DBOS (SQLite, PostgreSQL), the tool call in a durable step as their docs recommend, "
        + ", and ".join(parts)
        + " ([the engines' table](docs/chaos.md#against-the-engines-teams-pick-instead-restate-and-dbos))."
    )
