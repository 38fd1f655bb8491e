"""The `effectgate` script's entry point.

Ctrl-C at any moment, even while the command's modules are still loading (the first few tenths of
a second), ends the command with one line and exit status 130, never a traceback: this module
imports nothing of the gateway before it is inside the handler.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn

EXIT_INTERRUPTED = 130


def main() -> int:
    try:
        from effectgate.gateway.runtime.process import collector_paused

        with collector_paused():  # the command line's modules (process.py)
            from effectgate.gateway.runtime.cli import main as run

        return run()
    except KeyboardInterrupt as stopped:
        # cli.py re-raises it with the command's name once it knows it; from a signal it has none.
        who = f"effectgate {stopped.args[0]}" if stopped.args else "effectgate"
        end_interrupted(f"{who}: interrupted")


def end_interrupted(line: str) -> NoReturn:
    """Writes `line` to stderr and exits 130 at once.

    Left to the interpreter, an interrupted command could end killed by SIGINT (status -2) after
    its line: CPython kills itself with SIGINT at exit when a KeyboardInterrupt ever left code it
    ran through `PyRun_*`, as some C extensions do while they are imported, even though the program
    caught it (`_Py_UnhandledKeyboardInterrupt`). The command had not started (its modules were
    loading), so nothing is left to finish; only the output is flushed.
    """
    with contextlib.suppress(Exception):
        sys.stderr.write(line + "\n")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(EXIT_INTERRUPTED)
