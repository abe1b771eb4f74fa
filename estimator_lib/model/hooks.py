"""Training progress: a session hook that logs step, loss, examples/s and an ETA at a steady cadence.

It runs on the host CPU, on TPU and CPU alike: it asks the session for the global step and for the loss the
training loop already fetches (`Estimator.train` runs `[train_op, loss]`; on a TPU that loss is the host-side
value of the last step of each `iterations_per_loop` loop), so it adds no work to the model's graph.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable, Optional

import tensorflow as tf

from estimator_lib.progress import duration

log = logging.getLogger("estimator_lib.progress")


class ProgressHook(tf.compat.v1.train.SessionRunHook):
    """Logs "step S/T (P%), loss L, N examples/s, ETA D" at most every `every_seconds`, the rate over the time since
    the previous line, and at the end, the rate over the whole `train()` call.

    Args:
      total_steps: the step training stops at (for the percentage and the ETA).
      global_batch_size: examples per step, over all replicas.
      every_seconds: the cadence of the lines.
      emit: where a line goes (the logger by default; tests pass a list's append).
      clock: the time source (tests pass a fake one).
    """

    def __init__(
        self,
        total_steps: int,
        global_batch_size: int,
        every_seconds: float = 10.0,
        emit: Optional[Callable[[str], None]] = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._total, self._batch, self._every = total_steps, global_batch_size, every_seconds
        self._emit = emit or log.info
        self._clock = clock
        self._step_tensor = None
        self._last_time = self._last_step = self._first_time = self._first_step = None
        self._last_loss = math.nan

    def begin(self) -> None:
        self._step_tensor = tf.compat.v1.train.get_global_step()

    def before_run(self, run_context):
        fetches = {"step": self._step_tensor}
        original = run_context.original_args.fetches
        if isinstance(original, (list, tuple)) and len(original) == 2:  # Estimator.train: [train_op, loss]
            fetches["loss"] = original[1]
        return tf.compat.v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values) -> None:
        step, now = int(run_values.results["step"]), self._clock()
        self._last_loss = float(run_values.results.get("loss", math.nan))
        if self._first_time is None:
            self._first_time, self._first_step = now, step
            self._last_time, self._last_step = now, step
            return
        if now - self._last_time >= self._every:
            self._report(step, now)

    def end(self, session) -> None:
        if self._last_time is not None:
            # The last stretch can be a step or two plus the final checkpoint: the rate is the whole call's.
            self._last_time, self._last_step = self._first_time, self._first_step
            self._report(int(session.run(self._step_tensor)), self._clock())

    def _report(self, step: int, now: float) -> None:
        elapsed, done = now - self._last_time, step - self._last_step
        rate = done / elapsed if elapsed > 0 else 0.0
        left = max(self._total - step, 0)
        eta = duration(left / rate) if rate > 0 else "unknown"
        percent = 100.0 * step / self._total if self._total else 100.0
        self._emit(
            f"step {step}/{self._total} ({percent:.0f}%), loss {self._last_loss:.4g}, "
            f"{rate * self._batch:,.0f} examples/s, ETA {eta}"
        )
        self._last_time, self._last_step = now, step
