"""What both engine workers share: the command line, the announce line, the crash point."""

from __future__ import annotations

import argparse
import os
import sys

CRASHED = 3  # the exit code of a worker that died at the dangerous point on purpose
# This process's crash point (0: none) and the provider answers it has had, set by `parse`.
_crash = [0]
_answers = [0]


def parse(prog: str, argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--port", type=int, required=True)
    # The supervisor's listening socket on that port (chaos/peers/supervisor.py), inherited:
    # served on as it is, never bound anew.
    parser.add_argument("--fd", type=int, default=-1, help="serve on this inherited listening socket")
    parser.add_argument("--db", default="", help="DBOS's system database URL (sqlite:///FILE or postgresql://...)")
    parser.add_argument("--crash-after", type=int, default=0, help="die after this many provider answers (0: never)")
    args = parser.parse_args(argv)
    _crash[0] = args.crash_after
    return args


def announce(port: int) -> None:
    """The one stdout line the harness waits for; everything after it goes to stderr (the
    engines' own logs included), so a pipe nobody reads never fills."""
    print(f"worker listening on port {port}", flush=True)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())


def crash_point() -> None:
    """The provider answered, the engine has not recorded the step: the most dangerous moment to
    die. With `--crash-after N` the worker exits there (a real exit, no clean-up) after its N-th
    provider answer; the harness restarts it, and the engine recovers the step."""
    _answers[0] += 1
    if _crash[0] and _answers[0] >= _crash[0]:
        os._exit(CRASHED)
