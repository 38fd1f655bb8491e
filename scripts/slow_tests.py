"""Rewrites tests/slow_tests.txt, the known-slow tests `make test` starts first (tests/slow_first.py),
from the JUnit XML of a run.

    .venv/bin/python -m pytest -n auto --dist worksteal --junitxml=run.xml
    .venv/bin/python scripts/slow_tests.py run.xml [more.xml ...]

Every test that took at least MIN_SECONDS (setup, call and teardown: JUnit's `time`) is listed
with its seconds, slowest first; a test found in several files keeps its longest time.
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


def main(argv: list[str]) -> int:
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
