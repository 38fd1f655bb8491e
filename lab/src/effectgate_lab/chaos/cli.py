"""`effectgate chaos`: six methods under the study's faults, the same fault streams, one report.

effectgate chaos --json run.json        # the default run (every table), recorded
effectgate chaos --seeds 70 --family-episodes 200 --json docs/chaos-run.json   # the committed run
effectgate chaos report run.json        # render a recorded run again
effectgate chaos report docs/chaos-run.json --write docs/chaos.md
effectgate chaos --parts headline --seeds 10 --methods wrapper,effectgate
effectgate chaos --parts mcp --seeds 20           # the study's setting through an MCP upstream
effectgate chaos --crash --methods effectgate --parts headline --seeds 10
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from effectgate_lab.chaos.model import DEFAULT_LAG, LEVELS, MARGIN, METHODS, Result
from effectgate_lab.chaos.reporting import docs_blocks
from effectgate_lab.chaos.reporting.readme import readme
from effectgate_lab.chaos.reporting.record import document, load, machine, results_of, save
from effectgate_lab.chaos.reporting.summary import summary
from effectgate_lab.chaos.reporting.tables import TABLES, meta_line
from effectgate_lab.chaos.runner import Options, Part, all_parts, at_least, default_parts, run_matrix


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
    part_names = tuple(p.name for p in all_parts())
    default = ",".join(p.name for p in default_parts())
    parser.add_argument("--seeds", type=int, default=50, help="seeds of the headline (other parts: half)")
    parser.add_argument(
        "--family-episodes",
        type=int,
        default=0,
        help="give the parts of each fault family of the engines' table more seeds until it has at least this "
        "many episodes per method, with keys and without (the committed run: 200)",
    )
    names = ",".join(part_names)
    parser.add_argument("--parts", default=default, help=f"comma-separated: {names} (default: {default})")
    parser.add_argument("--levels", default=",".join(LEVELS), help="keep only these levels in every part")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated: {','.join(METHODS)}")
    parser.add_argument("--lag", type=float, default=DEFAULT_LAG, help="the provider's lag in seconds")
    parser.add_argument("--crash", action="store_true", help="kill -9 the gateway amid traffic; faults never stop")
    parser.add_argument("--parallel", type=int, default=4, help="cells run at a time")
    parser.add_argument("--json", type=Path, help="record the run (episodes, rows, machine) here")
    parser.add_argument(
        "--window",
        choices=("margin", "auto"),
        default="margin",
        help='effectgate\'s window: margin x lag (default), or "auto", learned from a warm-up of 40 writes',
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if effectgate shows a false success, or a duplicate outside the cells that show a "
        "setting's edge on purpose (own step ids without unique = scope, a fixed window below the lag)",
    )
    return parser


def options_from(args: argparse.Namespace) -> Options:
    if not 1 <= args.seeds <= 1000 or not 1 <= args.parallel <= 64 or not 0.01 <= args.lag <= 10:
        raise argparse.ArgumentTypeError("--seeds must be 1..1000, --parallel 1..64, --lag 0.01..10")
    if not 0 <= args.family_episodes <= 5000:
        raise argparse.ArgumentTypeError("--family-episodes must be 0..5000")
    chosen = _list(args.parts, tuple(p.name for p in all_parts()), "--parts")
    levels = _list(args.levels, LEVELS, "--levels")
    parts = [replace(p, levels=tuple(lv for lv in p.levels if lv in levels)) for p in all_parts(args.seeds)]
    return Options(
        parts=at_least([p for p in parts if p.name in chosen and p.levels], args.family_episodes),
        methods=_list(args.methods, METHODS, "--methods"),
        lag=args.lag,
        crash=args.crash,
        parallel=args.parallel,
        window="auto" if args.window == "auto" else "",
    )


def broken_promise(r: Result, parts: dict[str, Part], window: str = "") -> bool:
    """effectgate's promise where it holds by design: never a false success; no duplicate except
    in the cells a part shows on purpose (Part.expected_to_break: subagents with their own step
    ids without `unique = "scope"`, a fixed window shorter than the lag). With `unique = "scope"`
    and with `consistency_window = "auto"` a duplicate breaks it."""
    e = r.episode
    part = parts.get(e.part, Part(e.part, (), ()))
    return r.false_success or (r.duplicate and not part.expected_to_break(e.behaviour, e.margin, window))


def violations(results: list[Result], options: Options) -> list[str]:
    parts = {p.name: p for p in options.parts}
    return [
        f"{r.episode.part} {r.episode.level} {r.episode.scenario} {r.episode.behaviour} x{r.episode.margin:g} "
        f"seed {r.episode.seed}: {r.truth.effects} effects, told {r.told_final.value}"
        for r in results
        if r.method == "effectgate" and broken_promise(r, parts, options.window)
    ]


def render(doc: dict[str, Any]) -> str:
    results = results_of(doc)
    sections = [meta_line(doc["meta"], results), summary(results, doc["meta"])]
    for name, fn in TABLES.items():
        text = fn(results)
        if text.count("\n") > 1:
            sections.append(f"### {name}\n\n{text}")
    return "\n\n".join(sections) + "\n"


def report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="effectgate chaos report", description="render a recorded chaos run")
    parser.add_argument("run", type=Path, help="a file written by `effectgate chaos --json`")
    parser.add_argument("--write", type=Path, nargs="*", default=[], help="rewrite the chaos blocks of these files")
    parser.add_argument("--prefix", default="", help="rewrite only blocks named PREFIX+table (crash_ for --crash runs)")
    args = parser.parse_args(argv)
    doc = load(args.run)
    if not args.write:
        print(render(doc), end="")
        return 0
    for path in args.write:
        path.write_text(docs_blocks.rewrite(path.read_text(), lambda name: block(doc, name), args.prefix))
    return 0


def block(doc: dict[str, Any], name: str) -> str:
    """The text of one named block of the docs, rendered from a recorded run."""
    results = results_of(doc)
    if name == "meta":
        return meta_line(doc["meta"], results)
    if name == "summary":
        return summary(results, doc["meta"])
    if name == "readme":
        return readme(results, doc["meta"])
    if name not in TABLES:
        raise KeyError(f"no chaos table named {name!r}; known: meta, summary, readme, {', '.join(TABLES)}")
    return TABLES[name](results)


def main(argv: list[str]) -> int:
    """the chaos study: six methods under the same seeded provider faults, one report"""
    if argv[:1] == ["report"]:
        return report(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options = options_from(args)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    # The harness provokes failures on purpose: the gateway's own warnings would drown the bar.
    logging.getLogger("effectgate").setLevel(logging.ERROR)
    # So would the MCP upstream's, which logs every answer a fault cut off.
    for name in ("mcp", "sse_starlette", "uvicorn"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    # A stopped gateway's reconciler leaves an orphaned waiter that asyncio reports at exit.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    meta: dict[str, Any] = {**machine(options.parallel), "lag_s": options.lag, "crash": options.crash}
    if options.window:
        meta["window"] = options.window
    meta["margin"] = MARGIN
    meta["argv"] = argv
    start = time.monotonic()
    results = asyncio.run(run_matrix(options))
    meta["wall_seconds"] = round(time.monotonic() - start)
    meta["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    doc = document(results, meta)
    if args.json:
        save(doc, args.json)
    print(render(doc), end="")
    bad = violations(results, options)
    for line in bad:
        print(f"effectgate violation: {line}", file=sys.stderr)
    return 1 if args.check and bad else 0
