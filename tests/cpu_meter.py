"""The CPU each test costs, in the JUnit XML (`--junitxml`): a `cpu_s` property per test, this
process's user + system time over setup, call and teardown plus that of the child processes it
waited for (gateways, CLIs, pip, node; not podman's containers, which are not our children) and
of the gateways forked for it (tests/gateway_forks.py: its driver reaps them and reports it).
The suite is CPU-bound on two cores, so this, not a test's wall time, says what shortens it:
`scripts/slow_tests.py --cpu run.xml` lists the costliest. Each test also gets its worker and the
wall-clock seconds (epoch) it started and ended at (`worker`, `t0`, `t1`): `scripts/slow_tests.py
--timeline run.xml` reads from them when each worker ran dry and what ran last."""

from __future__ import annotations

import os
import resource
import time

import pytest

from tests import gateway_forks

_STARTED = pytest.StashKey[float]()
_STARTED_AT = pytest.StashKey[float]()


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    forks = gateway_forks.reaped_cpu()  # the gateways forked for it (tests/gateway_forks.py)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forks


def started(item: pytest.Item) -> None:
    item.stash[_STARTED] = cpu_seconds()
    item.stash[_STARTED_AT] = time.time()


def finished(item: pytest.Item) -> None:
    if (began := item.stash.get(_STARTED, None)) is not None:
        item.user_properties.append(("cpu_s", f"{cpu_seconds() - began:.2f}"))
        item.user_properties.append(("worker", os.environ.get("PYTEST_XDIST_WORKER", "main")))
        item.user_properties.append(("t0", f"{item.stash[_STARTED_AT]:.2f}"))
        item.user_properties.append(("t1", f"{time.time():.2f}"))
