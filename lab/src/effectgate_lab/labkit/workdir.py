"""A command's working directory (its stores, its children's logs): removed when the command ends
well or is interrupted (Ctrl-C, a cancelled task), kept when it fails, with one line on stderr
naming it (`bench: logs kept in /tmp/effectgate-ab-…`) so the logs can be read.

A nightly bench or a test run would otherwise leave tens of MB in the temporary directory each
time. The directory is made under `tempfile.gettempdir()` (`TMPDIR`), as before.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# An interruption is the user's (or the caller's) choice, not a failure: nothing to read.
INTERRUPTIONS = (KeyboardInterrupt, asyncio.CancelledError)


def kept_line(command: str, path: Path) -> str:
    return f"{command}: logs kept in {path}"


@contextmanager
def temporary_workdir(prefix: str, command: str) -> Iterator[Path]:
    """A fresh directory `<TMPDIR>/<prefix>XXXX` for the `with` block; see the module's text."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    except INTERRUPTIONS:
        shutil.rmtree(path, ignore_errors=True)
        raise
    except BaseException:
        print(kept_line(command, path), file=sys.stderr, flush=True)
        raise
    shutil.rmtree(path, ignore_errors=True)
