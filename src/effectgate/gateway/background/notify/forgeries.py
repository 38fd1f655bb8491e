"""Webhook forgeries over a threshold: the webhook listener reports each refused delivery here;
when one adapter's `forged` refusals within a sink's `forgery_window` reach its `forgeries`, that
sink gets one notice (then none until the window has passed without reaching it again).
Counted per replica, in memory: each replica sees the deliveries sent to it."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable

from effectgate.gateway.background.notify.deliverer import Deliverer
from effectgate.gateway.model import Notice, notify


class ForgeryWatch:
    def __init__(self, deliverer: Deliverer, clock: Callable[[], float]) -> None:
        self._deliverer = deliverer
        self._clock = clock
        self._seen: dict[str, deque[float]] = defaultdict(deque)
        self._alerted: dict[tuple[str, str], float] = {}  # (sink, adapter) -> when

    def refused(self, adapter: str, reason: str) -> None:
        if reason != "forged":
            return
        now = self._clock()
        seen = self._seen[adapter]
        seen.append(now)
        sinks = [s for s in self._deliverer.sinks.values() if s.config.wants(notify.WEBHOOK_FORGERIES, "", "")]
        longest = max((s.config.forgery_window for s in sinks), default=0.0)
        while seen and seen[0] <= now - longest:
            seen.popleft()
        for sink in sinks:
            c = sink.config
            count = sum(1 for at in seen if at > now - c.forgery_window)
            last = self._alerted.get((sink.name, adapter))
            if count >= c.forgeries and (last is None or last <= now - c.forgery_window):
                self._alerted[(sink.name, adapter)] = now
                detail = {"adapter": adapter, "refused": count, "window_seconds": c.forgery_window}
                self._deliverer.post(
                    Notice(notify.WEBHOOK_FORGERIES, f"{sink.name}:{adapter}:{now!r}", "", "", now, detail=detail),
                    only=sink.name,
                )
