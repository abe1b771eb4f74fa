"""What the runner shows and keeps of a run: one console line per stage event and a heartbeat (`Progress`), the
console filter (`ConsoleFilter`), and the run's log file, which goes on in memory when the disk refuses it
(`LogFile`, `append_unwritten`)."""

from __future__ import annotations

import collections
import dataclasses
import io
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Mapping
from typing import IO, Any, Callable, Optional

from components.records import REUSED_MARKER
from estimator_lib.progress import count_down, duration
from pipelines import runs
from pipelines.local.failures import StageTail, cannot_write, signal_of
from pipelines.local.kfp_patches import QUIET_MARKER, TIMEOUT_MARKER, stage_of
from pipelines.run_summary import RunSummary

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


HEARTBEAT_SECONDS = 60.0  # off a terminal, at most one heartbeat line a minute per running stage
# A stage's progress lines (estimator_lib.progress, through the KFP executor's log format): training's
# "step 300/1000 (30%), ETA 40s, loss ...", and "<work>: 1,000/2,000 rows (50%), ... rows/s, ETA ..." of
# preparation and batch prediction.
_STAGE_PROGRESS = re.compile(r"\]: (?P<text>step \d+/\d+ \(\d+%\), ETA .*|.+: [\d,]+(?:/[\d,]+)? rows.* rows/s.*)$")
# Lines of a stage the console shows as they come (`estimator_lib.progress.early_stop_line`, the resolve stage's
# `release.ResolvedRun.notes`).
_STAGE_NEWS = re.compile(r"\]: (?P<text>early stopping at step \d+: .*|(?:baseline|warm start): none \(.*)$")
# The local runner's own status lines ("00:22:55.606 - INFO - Executing task 'train-model'"); the stages' logs are
# indented under them and go to the log file only.
_TASK_EVENT = re.compile(
    r"^\d\d:\d\d:\d\d\.\d{3} - \w+ - (?:Executing task '(?P<started>[\w-]+)'|"
    r"Task '(?P<ended>[\w-]+)' finished with status (?P<status>SUCCESS|FAILURE))"
)


def is_terminal(stream: IO[str]) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """Follows the runner's task events: records the running stage in the run's summary and prints one console
    line per stage (started, done, reused), and a heartbeat while a stage runs (`heartbeat`).

    The heartbeat says how long the stage has run and repeats its latest progress line (training's step, ETA,
    loss and steps/s; rows done and rate of preparation and batch prediction), its ETA counted down since the
    line came: on a terminal it is one line redrawn in place every second, elsewhere (a log, a pipe) a line
    every `every` seconds of a stage that runs that long, so a short run prints nothing more and a long one a
    line a minute.
    """

    def __init__(
        self,
        folder: runs.RunFolder,
        summary: RunSummary,
        console: IO[str],
        every: float = HEARTBEAT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.folder, self.summary, self.console = folder, summary, console
        self.stage: Optional[str] = None
        self.failed: Optional[str] = None
        self.reused: list[str] = []
        self.seconds: dict[str, float] = {}  # each stage that ended: its wall seconds (`summary.run.seconds`)
        self.latest = ""  # the running stage's last progress line
        self._latest_at = 0.0  # when it came: the heartbeat counts its ETA down from then
        self.tail = StageTail()  # the running (or failed) stage's last log lines
        self.killed_by: Optional[signal.Signals] = None  # the signal that ended the last stage's process
        self.unrecorded: Optional[tuple[str, str]] = None  # (stage, why) a record of the run was refused
        self.refused = False  # a stage was not started: a record of the run had been refused
        self.timed_out: Optional[str] = None  # why the stage was stopped at its timeout (`kfp_patches.run_stage`)
        self._running = False
        self._started = self._beat = 0.0
        self._every, self._clock = every, clock
        self._terminal = is_terminal(console)
        self._redrawn = False  # a heartbeat is on the terminal's last line
        self._lock = threading.Lock()  # lines arrive on the runner's thread, heartbeats on their own

    def line(self, line: str) -> None:
        with self._lock:
            self._line(line)

    def _line(self, line: str) -> None:
        if REUSED_MARKER in line and self.stage:
            self.reused.append(self.stage)
        reported = _STAGE_PROGRESS.search(line)
        if reported and self._running:
            self.latest, self._latest_at = reported["text"], self._clock()
        for marker in (QUIET_MARKER, TIMEOUT_MARKER) if self._running else ():
            said = line.partition(marker)[2].strip()
            if said:
                self._print(f"{self.stage}: {said}")
                self.timed_out = said if marker == TIMEOUT_MARKER else self.timed_out
        news = _STAGE_NEWS.search(line)
        if news and self._running:
            self._print(f"{self.stage}: {news['text']}")
        event = _TASK_EVENT.match(line)
        if not event:
            if self._running:
                self.tail.add(line)
            return
        if event["started"]:
            self.stage, self._started, self._beat = stage_of(event["started"]), self._clock(), self._clock()
            self._running, self.latest, self.tail, self.killed_by = True, "", StageTail(), None
            self.summary = dataclasses.replace(self.summary, stage=self.stage)
            try:
                self.folder.write_summary(self.summary)
            except OSError as e:
                self.unrecordable(self.stage, cannot_write(e))
            self._print(f"{self.stage}: running")
        elif event["status"] == "SUCCESS":
            self._running = False
            stage = stage_of(event["ended"])
            done = "reused (inputs unchanged)" if stage in self.reused else "done"
            self._print(f"{stage}: {done} ({self._ended(stage):.1f} s)")
        else:
            self._running = False
            self.failed = stage_of(event["ended"])
            self._ended(self.failed)
            if self._redrawn:  # the CLI reports the failure next, on a line of its own
                self.console.write("\r\x1b[K")
                self._redrawn = False

    def _ended(self, stage: str) -> float:
        """Records and returns the wall seconds `stage` ran."""
        self.seconds[stage] = round(self._clock() - self._started, 1)
        return self.seconds[stage]

    def unrecordable(self, stage: Optional[str], why: str) -> None:
        """Notes that the disk refused a record of the run (its log, its summary) while `stage` ran: the first
        refusal is kept, and no stage starts after it (`refusal`)."""
        if self.unrecorded is None:
            self.unrecorded = (stage or "runner", why)

    def refusal(self) -> Optional[str]:
        """Why the next stage must not start (a record of the run was refused), or None; a refusal is noted
        (`refused`)."""
        if self.unrecorded is None:
            return None
        self.refused = True
        return self.unrecorded[1]

    def exited(self, code: int) -> None:
        """Records how the running stage's process ended (its exit status, as the local runner got it)."""
        with self._lock:
            self.killed_by = signal_of(code)

    def heartbeat(self) -> None:
        """Shows that the running stage is alive (call it every second or so)."""
        with self._lock:
            now = self._clock()
            if not self._running or (not self._terminal and now - self._beat < self._every):
                return
            self._beat = now
            text = f"{self.stage}: still running ({duration(now - self._started)})"
            text += f": {count_down(self.latest, now - self._latest_at)}" if self.latest else ""
            if self._terminal:
                width = shutil.get_terminal_size().columns - 1
                self.console.write(f"\r\x1b[K[{time.strftime('%H:%M:%S')}] {text}"[: width + 4])
                self.console.flush()
                self._redrawn = True
            else:
                self._print(text)

    def _print(self, text: str) -> None:
        prefix = "\r\x1b[K" if self._redrawn else ""  # the line replaces a redrawn heartbeat
        self._redrawn = False
        self.console.write(f"{prefix}[{time.strftime('%H:%M:%S')}] {text}\n")
        self.console.flush()


def keep_beating(progress: Progress, interval: float = 1.0) -> None:
    while True:
        time.sleep(interval)
        progress.heartbeat()


class ConsoleFilter(io.TextIOBase):
    """A stdout stand-in: everything, without ANSI colour codes, goes to the log; the console gets one line per
    stage event (or everything, when verbose)."""

    def __init__(self, log: IO[str], console: IO[str], verbose: bool, progress: Optional[Progress] = None):
        self._log, self._console, self._verbose, self._progress, self._pending = log, console, verbose, progress, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        plain = _ANSI.sub("", text)
        self._log.write(plain)
        self._pending += plain
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if self._verbose:
                self._console.write(line + "\n")
            if self._progress is not None:
                self._progress.line(line)
        return len(text)

    def flush(self) -> None:
        self._log.flush()
        self._console.flush()


class LogFile(io.TextIOBase):
    """The run's log as the runner appends to it, unbuffered. When the disk refuses a write (full, read-only),
    the runner goes on without its log: the first refusal is reported to `on_refusal` (which ends the run after
    the running stage), and what is written from then on is kept here (its last `keep` lines), for the failed
    stage's error (`failures.failure_message`) and for the supervisor to append once the summary is written
    (`append_unwritten`)."""

    def __init__(self, path: str, on_refusal: Callable[[str], None], keep: int = 2000):
        self.path, self._on_refusal = path, on_refusal
        self.error: Optional[str] = None
        self._kept: collections.deque[str] = collections.deque(maxlen=keep)  # refused whole lines
        self._partial, self._refused_lines = "", 0  # the refused text after the last newline; lines refused
        self._fd: Optional[int] = None
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            self._refused(e)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "replace")
        while data and self.error is None:
            try:
                data = data[os.write(self._fd, data) :]
            except OSError as e:
                self._refused(e)
        if data:  # the rest of a write the disk cut short continues the log's last line
            *lines, self._partial = (self._partial + data.decode("utf-8", "replace")).split("\n")
            self._kept.extend(lines)
            self._refused_lines += len(lines)
        return len(text)

    def _refused(self, error: OSError) -> None:
        self.error = cannot_write(OSError(error.errno, error.strerror, self.path))
        self._on_refusal(self.error)

    def unwritten(self) -> str:
        """The text the disk refused, as it continues the log (its last `keep` lines; a line break stands for
        those left out)."""
        dropped = self._refused_lines > len(self._kept)
        return ("\n" if dropped else "") + "".join(f"{line}\n" for line in self._kept) + self._partial

    def ending(self) -> Optional[dict[str, Any]]:
        """What the supervisor appends to the log (`append_unwritten`): None when every line was written."""
        if self.error is None:
            return None
        lines = self._refused_lines + bool(self._partial)
        lost = self._refused_lines - len(self._kept)
        return {"error": self.error, "text": self.unwritten(), "lines": lines, "lost": lost}

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        super().close()


def append_unwritten(log_path: str, cut: Optional[Mapping[str, Any]]) -> None:
    """Appends to the log the text the disk refused while the run ran (`LogFile.ending`), after a line that
    says so; nothing when none was refused."""
    if not cut:
        return
    with open(log_path, "a+b") as log:
        ends_a_line = _ends_a_line(log)
        rest = f"the first {cut['lost']} are lost, the others follow" if cut["lost"] else "they follow"
        note = f"==== the disk refused {cut['lines']} lines of this log when they were logged ({cut['error']}); {rest}"
        text = ("" if ends_a_line else "\n") + f"{note} ====\n{cut['text']}"
        log.write((text if text.endswith("\n") else text + "\n").encode("utf-8"))


def _ends_a_line(log: IO[bytes]) -> bool:
    size = log.seek(0, os.SEEK_END)
    if size == 0:
        return True
    log.seek(size - 1)
    return log.read(1) == b"\n"
