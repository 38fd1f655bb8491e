"""`make bench`: what the gateway costs, with every server in its own process and the floors
measured in the same run (see docs/benchmarks.md).

    python -m effectgate_lab.bench [--n 1000] [--scale 1000000] [--rss-requests 200000] [--json FILE]
    python -m effectgate_lab.bench --quick        # a small run that checks the bench itself works
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import replace
from pathlib import Path

from effectgate_lab.bench.report import machine, render, to_json, write_json
from effectgate_lab.bench.run import Options, run


def options_from(argv: list[str] | None) -> tuple[Options, Path | None]:
    parser = argparse.ArgumentParser(prog="python -m effectgate_lab.bench", description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="calls per measurement (2x at c>=64)")
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated concurrency levels")
    parser.add_argument("--scale", type=int, default=1_000_000, help="stored actions of the scale test (0 = skip)")
    parser.add_argument("--rss-requests", type=int, default=200_000, help="requests of the RSS run (0 = skip)")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-tracing", action="store_true", help="skip the tracing on/off comparison")
    parser.add_argument("--no-limits", action="store_true", help="skip the limits on/off comparison")
    parser.add_argument("--workers", type=int, default=2, help="serve --workers N against one process (0 = skip)")
    parser.add_argument(
        "--no-clock", action="store_true", help="skip the store clock / host clock comparison (PostgreSQL)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that every path works")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    levels = tuple(int(c) for c in args.concurrency.split(","))
    opts = Options(
        n=args.n,
        concurrency=levels,
        scale=args.scale,
        rss_requests=args.rss_requests,
        postgres=not args.no_postgres,
        tracing=not args.no_tracing,
        limits=not args.no_limits,
        workers=args.workers,
        clock=not args.no_clock,
    )
    if args.quick:
        opts = replace(opts, n=40, small=200, scale=2000, rss_requests=400)
    return opts, args.json


def main(argv: list[str] | None = None) -> None:
    opts, json_path = options_from(argv)
    meta = machine()
    results = asyncio.run(run(opts))
    print(render(results, opts, meta), flush=True)
    if json_path is not None:
        write_json(json_path, to_json(results, opts, meta))


if __name__ == "__main__":
    main()
