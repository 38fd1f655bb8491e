"""The engines beside effectgate: every part pooled into fault families, split by whether the
provider honours idempotency keys (Stripe-like) or has none (the CRM), so that a reader sees where
a durable step's key is enough and where it is not. The families are model.FAMILIES."""

from __future__ import annotations

from collections.abc import Sequence

from effectgate_lab.chaos.model import ENGINES, FAMILIES, KEYED, Result
from effectgate_lab.chaos.reporting.report import fmt_count, fmt_rate, summarize, table

COMPARED = ("retries_only", "stable_key", *ENGINES, "effectgate")


def family(r: Result) -> str:
    keys = "keys" if r.episode.scenario in KEYED else "no keys"
    return f"{FAMILIES[r.episode.part]} ({keys})"


def engines(results: Sequence[Result]) -> str:
    runs = [r for r in results if r.method in COMPARED and r.episode.part in FAMILIES]
    if not any(r.method in ENGINES for r in runs):
        return ""
    order = {name: i for i, name in enumerate(dict.fromkeys(FAMILIES.values()))}
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in runs:
        groups.setdefault((family(r), r.method), []).append(r)

    def rank(key: tuple[str, str]) -> tuple[int, str, int]:
        name, method = key
        return (order[name.rsplit(" (", 1)[0]], name, COMPARED.index(method))

    lines = []
    for key in sorted(groups, key=rank):
        (row,) = summarize(groups[key], ())
        lines.append(
            [
                key[0],
                key[1],
                str(row["episodes"]),
                fmt_rate(row, "duplicates"),
                fmt_count(row, "false_success"),
                fmt_count(row, "false_failure"),
                fmt_count(row, "unknown_final"),
                fmt_rate(row, "success_final", counts=False),
            ]
        )
    header = (
        "fault family (provider)",
        "method",
        "episodes",
        "duplicates (95% CI)",
        "false success",
        "false failure",
        "unknown",
        "success",
    )
    return table(header, lines)
