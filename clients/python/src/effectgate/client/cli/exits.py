"""The operator commands' exit codes (a module of its own: the gateway's `effectgate` reads them
without loading the commands, their client and their renderers).

0    done (a --watch stopped with Ctrl-C too)
1    the gateway answered with an error, or could not be reached
2    usage or local configuration: a bad option, an unreadable TLS file
3    no such action (NOT_FOUND)
130  interrupted (Ctrl-C) before the command finished
"""

from __future__ import annotations

EXIT_OK, EXIT_GATEWAY, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
