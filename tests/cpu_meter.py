"""The CPU each test costs, in the JUnit XML (`--junitxml`): a `cpu_s` property per test, this
process's user + system time over setup, call and teardown plus that of the child processes it
waited for (gateways, CLIs, pip, node; not podman's containers, which are not our children).
The suite is CPU-bound on two cores, so this, not a test's wall time, says what shortens it:
`scripts/slow_tests.py --cpu run.xml` lists the costliest."""

from __future__ import annotations

import resource

import pytest

_STARTED = pytest.StashKey[float]()


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def started(item: pytest.Item) -> None:
    item.stash[_STARTED] = cpu_seconds()


def finished(item: pytest.Item) -> None:
    if (began := item.stash.get(_STARTED, None)) is not None:
        item.user_properties.append(("cpu_s", f"{cpu_seconds() - began:.2f}"))
