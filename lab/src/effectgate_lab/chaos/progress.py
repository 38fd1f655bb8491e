"""A one-line progress bar on stderr (redrawn in place on a terminal, every 10 % otherwise)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO = sys.stderr, width: int = 30) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream
        self.width = width
        self.start = time.monotonic()
        self.tty = stream.isatty()
        self._last_decile = -1

    def tick(self, label: str = "") -> None:
        self.done += 1
        filled = self.width * self.done // self.total
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"[{bar}] {self.done}/{self.total} episodes {time.monotonic() - self.start:5.0f}s {label}"
        if self.tty:
            self.stream.write("\r" + line[:120].ljust(120))
        elif (decile := 10 * self.done // self.total) != self._last_decile:
            self._last_decile = decile
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
