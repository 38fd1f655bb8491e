"""Rewrites tests/slow_tests.txt, the known-slow tests `make test` starts first (tests/slow_first.py),
from the JUnit XML of a run.

    .venv/bin/python -m pytest -n auto --dist worksteal --junitxml=run.xml
    .venv/bin/python scripts/slow_tests.py run.xml [more.xml ...]

Every test that took at least MIN_SECONDS (setup, call and teardown: JUnit's `time`) is listed
with its seconds, slowest first; a test found in several files keeps its longest time.

    .venv/bin/python scripts/slow_tests.py --cpu run.xml

prints instead (and writes nothing) the CPU each test module cost (tests/cpu_meter.py's `cpu_s`),
costliest first, with the run's total: the suite is CPU-bound, so this says what shortens it.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "tests" / "slow_tests.txt"
MIN_SECONDS = 8.0
HEADER = """\
# The tests `make test` starts first, dealt out to the xdist workers (tests/slow_first.py): node id
# and the seconds it took. Rewritten by scripts/slow_tests.py from a run's JUnit XML; a test missing
# here only starts later, a stale line is ignored.
"""


def nodeid(classname: str, name: str) -> str:
    """pytest's node id from JUnit's classname (dotted module, then classes) and name."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = "/".join(parts[:cut]) + ".py"
        if (ROOT / module).is_file():
            return "::".join([module, *parts[cut:], name])
    return f"{classname}::{name}"


def durations(reports: list[Path]) -> dict[str, float]:
    took: dict[str, float] = {}
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            node = nodeid(case.get("classname", ""), case.get("name", ""))
            took[node] = max(took.get(node, 0.0), float(case.get("time", "0")))
    return took


def cpu_by_module(reports: list[Path]) -> dict[str, float]:
    cost: dict[str, float] = {}
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            module = nodeid(case.get("classname", ""), case.get("name", "")).split("::", 1)[0]
            for prop in case.iter("property"):
                if prop.get("name") == "cpu_s":
                    cost[module] = cost.get(module, 0.0) + float(prop.get("value", "0"))
    return cost


def main(argv: list[str]) -> int:
    if argv[:1] == ["--cpu"]:
        cost = cpu_by_module([Path(a) for a in argv[1:]])
        for module, seconds in sorted(cost.items(), key=lambda kv: -kv[1]):
            print(f"{seconds:8.1f} s  {module}")
        print(f"{sum(cost.values()):8.1f} s  in all ({len(cost)} modules)")
        return 0
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    took = durations([Path(a) for a in argv])
    slow = sorted(((s, n) for n, s in took.items() if s >= MIN_SECONDS), reverse=True)
    LIST.write_text(HEADER + "".join(f"{n} {s:.0f}\n" for s, n in slow))
    print(f"{len(slow)} tests of {len(took)} took {MIN_SECONDS:g} s or more: {LIST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
