"""effectgate_lab.interrupt.run_quietly (`make demo`'s entry): Ctrl-C at any moment ends with one
line and exit status 130. The moments themselves are tested on real processes in
tests/test_cli_hints.py; this is the one a real signal hits too rarely to test that way."""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest

from effectgate_lab.interrupt import EXIT_INTERRUPTED, run_quietly


async def work() -> int:
    return 0


def test_an_interrupt_before_the_coroutine_started_is_still_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # SIGINT landing after the coroutine is made and before asyncio.run starts it (while the
    # event loop is being made): seen once in a demo interrupted at 0.53 s on a loaded machine,
    # the line then followed by the interpreter's "coroutine ... was never awaited" warning.
    def interrupted(coroutine: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(asyncio, "run", interrupted)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert run_quietly(f"{__name__}:work", "demo") == EXIT_INTERRUPTED
        gc.collect()
    assert [str(w.message) for w in seen] == []
    assert capsys.readouterr().err.strip().splitlines() == ["demo interrupted"]
