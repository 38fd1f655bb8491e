"""Named crash points for the crash-recovery tests (the FoundationDB / TiKV failpoint idea).

`EFFECTGATE_CRASH_AT=after_dispatched` makes the process SIGKILL itself the first time it
reaches that point, so a test can prove recovery from each durable state;
`EFFECTGATE_PAUSE_AT=after_dispatched` makes it SIGSTOP itself there instead (a stalled worker,
resumed later by SIGCONT). Unset (production), a failpoint is two string comparisons.

The points are the durable states a crash can leave behind: `after_planned` (PLANNED committed,
nothing sent: an approval, or a claim with no time left to send), `after_dispatched` (a
DISPATCHED attempt committed and not yet sent: a new action's claim, or a re-dispatch),
`after_provider_commit` (the provider answered, the receipt is not yet stored).
"""

from __future__ import annotations

import os
import signal

POINTS = ("after_planned", "after_dispatched", "after_provider_commit")
# The notifications' deliverer (docs/notifications.md): a row staged and not yet sent, sent and
# not yet removed from the outbox.
NOTIFY_POINTS = ("before_notify", "after_notify")
_crash_at = os.environ.get("EFFECTGATE_CRASH_AT", "")
_pause_at = os.environ.get("EFFECTGATE_PAUSE_AT", "")


def hit(point: str) -> None:
    global _pause_at
    if _crash_at == point:
        os.kill(os.getpid(), signal.SIGKILL)
    if _pause_at == point:
        _pause_at = ""  # once: after SIGCONT the worker carries on as a stalled worker would
        os.kill(os.getpid(), signal.SIGSTOP)
