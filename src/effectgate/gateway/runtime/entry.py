"""The `effectgate` script's entry point.

Ctrl-C at any moment, even while the command's modules are still loading (the first few tenths of
a second), ends the command with one line and exit status 130, never a traceback: this module
imports nothing of the gateway before it is inside the handler.
"""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130


def main() -> int:
    try:
        from effectgate.gateway.runtime.cli import main as run

        return run()
    except KeyboardInterrupt:
        sys.stderr.write("effectgate: interrupted\n")
        return EXIT_INTERRUPTED
