"""Entry points that Ctrl-C ends quietly: one line and exit status 130, never a traceback.

The module that does the work is imported inside the handler, so an interrupt while its imports
still load (the first few tenths of a second) is caught too.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from typing import Any

EXIT_INTERRUPTED = 130


def run_quietly(target: str, label: str, argv: list[str] | None = None) -> int:
    """Runs `module:function` (a coroutine function, run by asyncio, or a plain one taking argv)."""
    outcome: Any = None
    try:
        import asyncio

        module, _, name = target.partition(":")
        function: Callable[..., Any] = getattr(importlib.import_module(module), name)
        outcome = function() if argv is None else function(argv)
        if asyncio.iscoroutine(outcome):
            outcome = asyncio.run(outcome)
        return int(outcome or 0)
    except KeyboardInterrupt:
        if isinstance(outcome, types.CoroutineType):
            # Interrupted before asyncio.run started it: closed now, or the interpreter warns
            # "coroutine ... was never awaited" at exit, after the one line.
            outcome.close()
        print(f"\n{label} interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
