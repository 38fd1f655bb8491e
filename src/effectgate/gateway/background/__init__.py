"""Work nobody asks for: recovery (the reconciler), retention, readiness, metric watchers."""

from __future__ import annotations

from effectgate.gateway.background.clock_watch import ClockWatch
from effectgate.gateway.background.compose import compose_background, no_problem, notifier_of
from effectgate.gateway.background.drift import DriftReport, audit, drift_job
from effectgate.gateway.background.expiry import expiry_job
from effectgate.gateway.background.notify import Deliverer, ForgeryWatch, Notices, Sink, build_sinks
from effectgate.gateway.background.readiness import Readiness
from effectgate.gateway.background.reconciler import Reconciler
from effectgate.gateway.background.retention import retention_job
from effectgate.gateway.background.runner import Job, Runner
from effectgate.gateway.background.watchers import backlog_job, limits_job

__all__ = [
    "ClockWatch",
    "Deliverer",
    "DriftReport",
    "ForgeryWatch",
    "Job",
    "Notices",
    "Readiness",
    "Reconciler",
    "Runner",
    "Sink",
    "audit",
    "backlog_job",
    "build_sinks",
    "compose_background",
    "drift_job",
    "expiry_job",
    "limits_job",
    "no_problem",
    "notifier_of",
    "retention_job",
]
