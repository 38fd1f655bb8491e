"""Named crash points for the crash-recovery tests (the FoundationDB / TiKV failpoint idea).

`EFFECTGATE_CRASH_AT=after_dispatched` makes the process SIGKILL itself the first time it
reaches that point, so a test can prove recovery from each durable state. Unset (production), a
failpoint is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

POINTS = ("after_planned", "after_dispatched", "after_provider_commit")
_armed = os.environ.get("EFFECTGATE_CRASH_AT", "")


def hit(point: str) -> None:
    if _armed == point:
        os.kill(os.getpid(), signal.SIGKILL)
