"""Progress of long work: rows of preparation and batch prediction (`RowProgress`), steps of training
(`TrainingProgress`): done, rate, ETA.

On a terminal it redraws one bar line in place; otherwise (a pipeline stage's log, a file) it writes a plain
line at a steady cadence, so logs stay readable and small.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
import time
from typing import IO, Callable, Optional, Tuple

log = logging.getLogger("estimator_lib.progress")


def duration(seconds: float) -> str:
    """3725 -> "1h02m05s"; 65 -> "1m05s"; 4.2 -> "4s"."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


DURATION = re.compile(r"(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?P<s>\d+)s")  # what `duration` writes


def count_down(line: str, seconds: float) -> str:
    """`line` with its "ETA D" lowered by `seconds` (not below 0): a progress line shown again later."""
    match = re.search(r"ETA (" + DURATION.pattern + ")", line)
    if match is None:
        return line
    left = 3600 * int(match["h"] or 0) + 60 * int(match["m"] or 0) + int(match["s"]) - seconds
    return line[: match.start(1)] + duration(max(left, 0.0)) + line[match.end(1) :]


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


@dataclasses.dataclass
class TrainingProgress:
    """The progress of one training stage, over all its `train()` calls and validation rounds.

    The rate is measured over the stage's wall time since `started`: it includes checkpoint saves and the set-up
    of each round's `train()` call (graph, session, restore), which recur with the steps. The ETA's rate counts
    from the first step measured in the stage (`measured`) once a later one is, so the stage's one-time start is
    not extrapolated over the steps left. Validation is timed on
    its own (`validated`), because it recurs with the rounds: the ETA is the budget's remaining steps at the
    training wall rate plus the validations still to come at their measured mean cost. With early stopping it
    also says the soonest step at which the stage can stop (after `patience` rounds without an improvement).

    Attributes:
      budget: the step training stops at.
      batch_size: examples per step, over all replicas.
      start_step: the global step when the stage began (a resumed stage starts above 0).
      started: the clock's time when the stage began.
      round_steps: steps per validation round; None without validation.
      patience: rounds without an improvement that stop training; None without early stopping.
      every_seconds: the cadence of the lines (`due`).
    """

    budget: int
    batch_size: int
    start_step: int
    started: float
    round_steps: Optional[int] = None
    patience: Optional[int] = None
    every_seconds: float = 10.0
    validations: int = 0
    validation_seconds: float = 0.0
    rounds_since_best: int = 0
    last_line: Optional[float] = None
    first_measured: Optional[Tuple[int, float, float]] = None  # (step, time, validation seconds then)

    def measured(self, step: int, now: float) -> None:
        """Records a step read after a run; the first one in the stage anchors the ETA's rate (`eta`)."""
        if self.first_measured is None and step > self.start_step:
            self.first_measured = (step, now, self.validation_seconds)

    def validated(self, seconds: float, improved: bool) -> None:
        """Records one validation round: its wall time and whether it improved the best loss."""
        self.validations += 1
        self.validation_seconds += seconds
        self.rounds_since_best = 0 if improved else self.rounds_since_best + 1

    def steps_per_second(self, step: int, now: float) -> float:
        """Steps trained in this stage over its whole wall time (validation included)."""
        elapsed = now - self.started
        return (step - self.start_step) / elapsed if elapsed > 0 else 0.0

    def validations_left(self, step: int, until: int) -> int:
        """Validations from `step` (one is due at `step` when it ends a round) up to and with the one at `until`."""
        if not self.round_steps or step > until:
            return 0
        ends = (until - 1) // self.round_steps - max(step - 1, 0) // self.round_steps  # round ends in [step, until)
        return ends + 1  # and the last validation, at `until`

    def eta(self, step: int, now: float, until: Optional[int] = None) -> Optional[float]:
        """Seconds until training reaches `until` (the budget by default) and has validated it; None before any
        step is measured."""
        until = self.budget if until is None else until
        trained = step - self.start_step
        training_seconds = now - self.started - self.validation_seconds
        if self.first_measured is not None and step > self.first_measured[0]:
            # From the first measured step on: the steps and round set-ups that recur, not the stage's one-time
            # start (the process's first graph, session and execution), which would inflate a short stage's ETA.
            first_step, first_time, validated_then = self.first_measured
            trained = step - first_step
            training_seconds = now - first_time - (self.validation_seconds - validated_then)
        if trained <= 0 or training_seconds <= 0:
            return None
        per_validation = self.validation_seconds / self.validations if self.validations else 0.0
        steps = max(until - step, 0)
        return steps * training_seconds / trained + self.validations_left(step, until) * per_validation

    def soonest_stop(self, step: int) -> Optional[int]:
        """The first step at which early stopping can end training (no improvement from now on), when that comes
        before the budget; None without early stopping."""
        if self.patience is None or not self.round_steps:
            return None
        rounds = max(self.patience - self.rounds_since_best, 1)
        stop = (step // self.round_steps + rounds) * self.round_steps
        if step % self.round_steps == 0 and step > self.start_step:  # this round's validation is still due
            stop -= self.round_steps
        return stop if stop < self.budget else None

    def due(self, now: float) -> bool:
        """Whether a line is due (the first measured step, then every `every_seconds`)."""
        return self.last_line is None or now - self.last_line >= self.every_seconds

    def line(self, step: int, loss: float, now: float) -> str:
        """ "step S/T (P%), ETA D, loss L, R steps/s (N examples/s)[; early stopping can end it at step X, in D']"
        (what a narrow console must show first comes first); marks the line as written (`due`)."""
        self.last_line = now
        rate = self.steps_per_second(step, now)
        percent = 100.0 * step / self.budget if self.budget else 100.0
        eta = self.eta(step, now)
        text = (
            f"step {step}/{self.budget} ({percent:.0f}%), ETA {'unknown' if eta is None else duration(eta)}, "
            f"loss {loss:.4g}, {rate:,.1f} steps/s ({rate * self.batch_size:,.0f} examples/s)"
        )
        stop = self.soonest_stop(step)
        soonest = None if stop is None else self.eta(step, now, stop)
        return text if soonest is None else f"{text}; early stopping can end it at step {stop}, in {duration(soonest)}"


def early_stop_line(step: int, patience: int, best_step: int, best_loss: float) -> str:
    """The one line that says training stopped early, where, and which round is the model."""
    return (
        f"early stopping at step {step}: no improvement of the validation loss for {patience} "
        f"round{'' if patience == 1 else 's'}; "
        f"the model is step {best_step}'s checkpoint, validation loss {best_loss:.6g}"
    )
