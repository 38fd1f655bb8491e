"""Runs one provider simulator until SIGINT/SIGTERM.

    python -m effectgate_lab.simulators stripe --port 12111 --seed 1 --search-lag 1.5 \\
        --level medium --fault-slow 0.1 --script drop_after_commit,error_after_commit

It prints its base URL on stdout (one line) once it listens on 127.0.0.1. Options shared by all
simulators: `--port`, `--seed`, `--level` (the study's low/medium/high mix), one
`--fault-<kind> P` per fault kind (`--fault-timeout` is the study's name for
`--fault-drop-after-commit`), `--slow-seconds`, `--visibility-lag`, `--latency`, `--script`.
Provider options (`--api-key`, `--search-lag`, `--settle-seconds`) are read by the factories
that use them. A new simulator is one line in `SIMULATORS`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable

from effectgate_lab.simulators.crm_sim import CrmSimulator
from effectgate_lab.simulators.faults import FAULT_KINDS, FaultPlan
from effectgate_lab.simulators.postmark_sim import PostmarkSimulator
from effectgate_lab.simulators.server import SimulatorServer
from effectgate_lab.simulators.square_sim import SquareSimulator
from effectgate_lab.simulators.stripe_sim import DEFAULT_API_KEY, StripeSimulator

Factory = Callable[[argparse.Namespace, FaultPlan], SimulatorServer]

SIMULATORS: dict[str, Factory] = {
    "stripe": lambda a, plan: StripeSimulator(
        api_key=a.api_key,
        search_lag=a.search_lag,
        settle_seconds=a.settle_seconds,
        faults=plan,
        visibility_lag=a.visibility_lag,
        latency=a.latency,
    ),
    "postmark": lambda a, p: PostmarkSimulator(
        server_token=a.api_key,
        search_lag=a.search_lag,
        faults=p,
        visibility_lag=a.visibility_lag,
        latency=a.latency,
    ),
    "square": lambda a, p: SquareSimulator(
        access_token=a.api_key,
        list_lag=a.search_lag,
        settle_seconds=a.settle_seconds,
        faults=p,
        visibility_lag=a.visibility_lag,
        latency=a.latency,
    ),
    "crm": lambda a, p: CrmSimulator(api_key=a.api_key, faults=p, visibility_lag=a.visibility_lag, latency=a.latency),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m effectgate_lab.simulators",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("simulator", choices=sorted(SIMULATORS))
    parser.add_argument("--port", type=int, default=0, help="0 = any free port")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--level", choices=("low", "medium", "high"), help="the study's fault mix")
    for kind in FAULT_KINDS:
        flags = [f"--fault-{kind.value.replace('_', '-')}"]
        if kind.value == "drop_after_commit":
            flags.append("--fault-timeout")
        parser.add_argument(*flags, dest=kind.value, type=float, help=f"probability of {kind}")
    parser.add_argument("--slow-seconds", type=float, default=2.0)
    parser.add_argument("--visibility-lag", type=float, default=5.0, help="lag of delayed_visibility")
    parser.add_argument("--latency", type=float, default=0.0, help="processing time before a commit")
    parser.add_argument("--script", default="", help="comma-separated faults for the next writes")
    parser.add_argument("--api-key", default=None, help=f"accepted API key (default {DEFAULT_API_KEY})")
    parser.add_argument("--api-key-env", default=None, help="read the accepted API key from this variable")
    parser.add_argument("--search-lag", type=float, default=0.0)
    parser.add_argument("--settle-seconds", type=float, default=2.0, help="how long a partial effect takes")
    return parser


def plan_from_args(args: argparse.Namespace) -> FaultPlan:
    values: dict[str, float] = {
        k.value: getattr(args, k.value) for k in FAULT_KINDS if getattr(args, k.value) is not None
    }
    extra = {"seed": args.seed, "slow_seconds": args.slow_seconds, **values}
    if args.level:
        return FaultPlan.study_level(args.level, **extra)
    return FaultPlan(**extra)


async def serve(args: argparse.Namespace) -> None:
    sim = SIMULATORS[args.simulator](args, plan_from_args(args))
    if args.script:
        sim.injector.script(s.strip() or None for s in args.script.split(","))
    url = await sim.start(port=args.port)
    print(url, flush=True)
    print(f"{sim.name} simulator on {url}; admin under {url}/_sim/", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await sim.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.api_key_env:
        args.api_key = os.environ.get(args.api_key_env) or None
        if args.api_key is None:
            print(f"environment variable {args.api_key_env} is not set", file=sys.stderr)
            return 2
    args.api_key = args.api_key or DEFAULT_API_KEY
    try:
        asyncio.run(serve(args))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
