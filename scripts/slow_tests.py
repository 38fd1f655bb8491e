"""Rewrites tests/slow_tests.txt, the known-slow tests `make test` starts first (tests/slow_first.py),
from the JUnit XML of a run.

    .venv/bin/python -m pytest -n auto --dist worksteal --junitxml=run.xml
    .venv/bin/python scripts/slow_tests.py run.xml [more.xml ...]

Every test that took at least MIN_SECONDS (setup, call and teardown: JUnit's `time`) is listed
with its seconds, slowest first; a test found in several files keeps its longest time.

    .venv/bin/python scripts/slow_tests.py --cpu run.xml

prints instead (and writes nothing) the CPU each test module cost (tests/cpu_meter.py's `cpu_s`),
costliest first, with the run's total: the suite is CPU-bound, so this says what shortens it.

    .venv/bin/python scripts/slow_tests.py --timeline run.xml

prints when each xdist worker started its first test and ended its last (tests/cpu_meter.py's `t0`,
`t1`), and the tests of 1 s or more still running in the run's last minute: the tail a better
order would cut.
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


def properties(case: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def timeline(reports: list[Path]) -> None:
    runs = []  # (start, end, worker, cpu, node id)
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            props = properties(case)
            if "t0" in props:
                node = nodeid(case.get("classname", ""), case.get("name", ""))
                runs.append((float(props["t0"]), float(props["t1"]), props["worker"], float(props["cpu_s"]), node))
    if not runs:
        print("no timestamps (t0, t1) in these reports", file=sys.stderr)
        return
    begin, end = min(r[0] for r in runs), max(r[1] for r in runs)
    for worker in sorted({r[2] for r in runs}):
        mine = [r for r in runs if r[2] == worker]
        first, last = min(r[0] for r in mine) - begin, max(r[1] for r in mine) - begin
        busy = sum(r[1] - r[0] for r in mine)
        print(f"{worker}: {len(mine)} tests, from {first:.0f} s to {last:.0f} s, in tests {busy:.0f} s")
    print(f"{end - begin:.0f} s from the first test's start to the last one's end; in the last minute (1 s or more):")
    for start, stop, worker, cpu, node in sorted(runs, key=lambda r: r[1]):
        if stop > end - 60 and stop - start >= 1:
            print(f"  {worker} {start - begin:5.0f}-{stop - begin:5.0f} s  cpu {cpu:5.1f} s  {node}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--timeline"]:
        timeline([Path(a) for a in argv[1:]])
        return 0
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
