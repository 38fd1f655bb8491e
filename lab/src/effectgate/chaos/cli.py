"""`effectgate chaos`: the three methods under the study's faults, same seeds, one table.

effectgate chaos                       # 25 seeds x 3 levels x 4 scenarios x 3 methods
effectgate chaos --seeds 5 --levels high --crash --json chaos.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path

from effectgate.chaos.model import BEHAVIOURS, LEVELS, METHODS, Result
from effectgate.chaos.report import document, markdown, summarize
from effectgate.chaos.runner import Options, run_matrix
from effectgate.chaos.scenarios import SCENARIOS


def _list(value: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    chosen = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [v for v in chosen if v not in allowed]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{what}: choose from {', '.join(allowed)}")
    return tuple(v for v in allowed if v in chosen)  # canonical order


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="effectgate chaos", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=25, help="episodes per cell (seeds 0..N-1)")
    parser.add_argument("--levels", default=",".join(LEVELS), help="comma-separated: low,medium,high")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated scenario names")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated: direct,wrapper,effectgate")
    parser.add_argument("--behaviours", default=",".join(BEHAVIOURS), help="agent behaviours to draw from")
    parser.add_argument("--crash", action="store_true", help="kill -9 and restart the gateway at seeded moments")
    parser.add_argument(
        "--stuck-partials",
        action="store_true",
        help="partial writes never finish (email, CRM): the honest answer for them is UNKNOWN",
    )
    parser.add_argument("--parallel", type=int, default=4, help="cells run at a time")
    parser.add_argument("--json", type=Path, help="write every episode and the summaries here")
    parser.add_argument("--check", action="store_true", help="exit 1 if effectgate shows a duplicate or false success")
    return parser


def options_from(args: argparse.Namespace) -> Options:
    if not 1 <= args.seeds <= 1000 or not 1 <= args.parallel <= 64:
        raise argparse.ArgumentTypeError("--seeds must be 1..1000 and --parallel 1..64")
    return Options(
        seeds=args.seeds,
        levels=_list(args.levels, LEVELS, "--levels"),
        scenarios=_list(args.scenarios, tuple(SCENARIOS), "--scenarios"),
        methods=_list(args.methods, METHODS, "--methods"),
        behaviours=_list(args.behaviours, BEHAVIOURS, "--behaviours"),
        crash=args.crash,
        settle=not args.stuck_partials,
        parallel=args.parallel,
    )


def violations(results: list[Result]) -> list[str]:
    """effectgate's promise, episode by episode: no duplicate, no false success."""
    return [
        f"{r.episode.level} {r.episode.scenario} seed {r.episode.seed}: "
        f"{r.truth.effects} effects, told {r.told_final.value}"
        for r in results
        if r.method == "effectgate" and (r.duplicate or r.false_success)
    ]


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options = options_from(args)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    # The harness provokes failures on purpose: the gateway's own warnings would drown the bar.
    logging.getLogger("effectgate").setLevel(logging.ERROR)
    # A stopped gateway's reconciler leaves an orphaned waiter that asyncio reports at exit.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    start = time.monotonic()
    results = asyncio.run(run_matrix(options))
    wall = time.monotonic() - start
    print(markdown(summarize(results, ("method", "level")), ("method", "level")))
    print()
    print(markdown(summarize(results, ("method", "level", "scenario")), ("method", "level", "scenario")))
    print()
    print(markdown(summarize(results, ("method", "behaviour")), ("method", "behaviour")))
    print(f"\n{len(results)} episodes in {wall:.0f}s", file=sys.stderr)
    if args.json:
        meta = {"options": {**vars(options)}, "wall_seconds": round(wall, 1), "argv": argv}
        args.json.write_text(json.dumps(document(results, meta), indent=1, default=list) + "\n")
    bad = violations(results)
    for line in bad:
        print(f"effectgate violation: {line}", file=sys.stderr)
    return 1 if args.check and bad else 0
