"""[[notify]]'s subscriber to the core's observer: the facts worth a notification that no action
event records (a limit's denial, a breaker's opening) become notices for the deliverer. The core
only reports them (core/observer.py); it never calls the notifications itself."""

from __future__ import annotations

from collections.abc import Callable

from effectgate.gateway.core import Observer, TtlCache
from effectgate.gateway.model import ActionRecord, LimitExceeded, Notice, notify

# How long a replica remembers the denials it posted. The outbox's unique (sink, event_id) folds
# a retry only while the first notice is still queued; once delivered, its row is gone, and an
# agent retrying the refused call after that would be news again without this memory.
DENIALS_KEPT = 10_000
DENIAL_MEMORY = 3600.0


class Notices(Observer):
    """Posts a notice for each denial and each opening; `post` only queues (the deliverer's)."""

    def __init__(self, post: Callable[[Notice], None], monotonic: Callable[[], float]) -> None:
        self._post = post
        self._denied: TtlCache[str, bool] = TtlCache(DENIALS_KEPT, DENIAL_MEMORY, monotonic)

    def limit_denied(self, record: ActionRecord, error: LimitExceeded, at: float) -> None:
        # One notice per action, generation and limit: an agent retrying the call is not news,
        # whether its first notice is still queued or already delivered (this replica's memory).
        key = f"{record.action_id}:{record.generation}:{error.reason}"
        if self._denied.get(key):
            return
        self._denied.put(key, True)
        detail = {"reason": error.reason, "message": str(error), "figures": dict(error.figures)}
        self._post(Notice(notify.LIMIT_DENIED, key, record.tenant, record.tool, at, record.action_id, detail, record))

    def breaker_opened(self, tool: str, why: str, at: float) -> None:
        self._post(Notice(notify.BREAKER_OPENED, f"{tool}:{at!r}", "", tool, at, detail={"why": why}))
