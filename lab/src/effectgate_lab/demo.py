"""`make demo`: the gateway on SQLite, the Stripe simulator with faults, and a demo agent.

The rounds themselves are in `demo_rounds`; this entry only makes Ctrl-C quiet at any moment.
"""

from __future__ import annotations

import sys

from effectgate_lab.interrupt import run_quietly

if __name__ == "__main__":
    sys.exit(run_quietly("effectgate_lab.demo_rounds:main", "demo"))
