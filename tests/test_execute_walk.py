"""Issue 45's walk, held: one Execute stops in at most 25 modules of the gateway and enters
observability in one (observability/calls.py, everything a call leaves behind). The measure is
scripts/execute_walk.py itself, run as its own process: the test and the printed figures cannot
disagree about what a stop is, and no logging handler another test installed in this process
(whose formatter would then format the audit line) changes the walk."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "execute_walk.py"
LINE = re.compile(r"^(new|replay): \d+ stops, (\d+) distinct modules; observability entered \d+ times in (\d+) modules")


def test_one_execute_stops_in_at_most_25_modules_and_enters_observability_in_one() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    walks = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in map(LINE.match, done.stdout.splitlines()) if m}
    assert set(walks) == {"new", "replay"}, done.stdout
    for kind, (modules, observability) in walks.items():
        assert modules <= 25, f"{kind}: {modules} distinct modules\n{done.stdout}"
        assert observability == 1, f"{kind}: observability entered in {observability} modules\n{done.stdout}"
