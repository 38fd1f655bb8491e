"""Notifications ([[notify]], docs/notifications.md): the deliverer job, its sinks, the forgery watch."""

from __future__ import annotations

from effectgate.gateway.background.notify.deliverer import Deliverer
from effectgate.gateway.background.notify.forgeries import ForgeryWatch
from effectgate.gateway.background.notify.kinds import build_sinks
from effectgate.gateway.background.notify.sinks import DeliveryFailed, Sink

__all__ = ["Deliverer", "DeliveryFailed", "ForgeryWatch", "Sink", "build_sinks"]
