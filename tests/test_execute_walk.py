"""Issue 45's walk, held: one Execute stops in at most 25 modules of the gateway and enters
observability in one (observability/calls.py, everything a call leaves behind). The measure is
scripts/execute_walk.py's own `walk`, loaded from the script, so the test and the printed figures
cannot disagree about what a stop is."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "execute_walk.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("execute_walk", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind", ["new", "replay"])
async def test_one_execute_stops_in_at_most_25_modules_and_enters_observability_in_one(kind: str) -> None:
    script = _script()
    stops: list[str] = await script.walk(kind)
    assert stops and stops[0].startswith("rpc/"), stops  # the walk saw the call at all
    distinct = set(stops)
    assert len(distinct) <= 25, f"{kind}: {len(distinct)} distinct modules: {' > '.join(stops)}"
    entered = script.observed(stops)
    assert entered, f"{kind}: the walk never entered observability: {' > '.join(stops)}"
    assert len(entered) == 1, f"{kind}: observability entered in {len(entered)} modules: {dict(entered)}"
