"""Fakes for progress output: a clock the test moves by hand and a stream that says it is a terminal."""

from __future__ import annotations

import io


class Clock:
    """Reads `now`, which stands still until the test changes it."""

    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True
