"""Progress of long row-by-row work (preparation, batch prediction): rows done, rate, ETA.

On a terminal it redraws one bar line in place; otherwise (a pipeline stage's log, a file) it writes a plain
line at a steady cadence, so logs stay readable and small.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import IO, Callable, Optional

log = logging.getLogger("estimator_lib.progress")


def duration(seconds: float) -> str:
    """3725 -> "1h02m05s"; 65 -> "1m05s"; 4.2 -> "4s"."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class RowProgress:
    """Counts rows of `what`; reports every `every_seconds` (log lines) or redraws a bar (terminal).

    Args:
      what: e.g. "batch predict".
      total: rows expected, when known (for the percentage and the ETA).
      every_seconds: the cadence of plain lines.
      stream: where a bar is drawn; a bar only when it is a terminal (stderr by default).
      emit: where plain lines go (the logger by default).
      clock: the time source.
    """

    def __init__(
        self,
        what: str,
        total: Optional[int] = None,
        every_seconds: float = 15.0,
        stream: Optional[IO[str]] = None,
        emit: Optional[Callable[[str], None]] = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.what, self.total, self.every = what, total, every_seconds
        self.stream = stream if stream is not None else sys.stderr
        self.emit = emit or log.info
        self.clock = clock
        self.done = 0
        self.start = self.last = clock()
        self.bar = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, rows: int) -> None:
        self.done += rows
        now = self.clock()
        if self.bar or now - self.last >= self.every:
            self._show(now)
            self.last = now

    def finish(self) -> None:
        self._show(self.clock(), final=True)

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        if self.total:
            left = max(self.total - self.done, 0)
            eta = duration(left / rate) if rate > 0 else "unknown"
            return (
                f"{self.what}: {self.done:,}/{self.total:,} rows ({100.0 * self.done / self.total:.0f}%), "
                f"{rate:,.0f} rows/s, ETA {eta}"
            )
        return f"{self.what}: {self.done:,} rows, {rate:,.0f} rows/s"

    def _show(self, now: float, final: bool = False) -> None:
        text = self.line(now)
        if self.bar:
            self.stream.write("\r" + text + ("\n" if final else ""))
            self.stream.flush()
        else:
            self.emit(text)
