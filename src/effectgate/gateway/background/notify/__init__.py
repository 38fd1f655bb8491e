"""Notifications ([[notify]], docs/notifications.md): the deliverer job, its sinks, the forgery watch,
and the observer's subscriber that turns denials and breaker openings into notices."""

from __future__ import annotations

from effectgate.gateway.background.notify.deliverer import Deliverer
from effectgate.gateway.background.notify.forgeries import ForgeryWatch
from effectgate.gateway.background.notify.kinds import build_sinks
from effectgate.gateway.background.notify.notices import Notices
from effectgate.gateway.background.notify.sinks import DeliveryFailed, Sink

__all__ = ["Deliverer", "DeliveryFailed", "ForgeryWatch", "Notices", "Sink", "build_sinks"]
