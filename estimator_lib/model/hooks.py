"""Training progress: a session hook that reports step, loss, steps/s and the stage's ETA at a steady cadence,
and writes the host-side TensorBoard scalars (learning rate, steps/s).

It runs on the host CPU, on TPU and CPU alike: it asks the session for the global step and for the loss the
training loop already fetches (`Estimator.train` runs `[train_op, loss]`; on a TPU that loss is the host-side
value of the last step of each `iterations_per_loop` loop), so it adds no work to the model's graph. The
progress (`estimator_lib.progress.TrainingProgress`) outlives the hook: one hook per `train()` call of a round,
one progress for the stage, so the rate and the ETA span rounds, validations and checkpoints.

TensorBoard: Estimator writes the `loss` scalar itself (its summary hook, every `save_summary_steps`); this
hook adds `learning_rate` and `steps_per_second` to the same event file (`FileWriterCache` keeps one writer per
directory and process), so a training stage leaves one event file in the model directory.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable, Optional

import tensorflow as tf

from estimator_lib.progress import TrainingProgress

log = logging.getLogger("estimator_lib.progress")
LearningRateFn = Callable[[tf.Tensor], tf.Tensor]  # global step (int64 scalar) -> learning rate (float32 scalar)


class ProgressHook(tf.compat.v1.train.SessionRunHook):
    """Logs `TrainingProgress.line` when a line is due, and writes the scalars into `summary_dir` after every
    session run (each trains `iterations_per_loop` steps).

    Args:
      progress: the stage's progress (shared by the rounds' hooks).
      summary_dir: the model directory, where Estimator writes its training summaries.
      learning_rate_fn: builds the scheduled learning rate from the global step on the host (None: not written).
      emit: where a line goes (the logger by default; tests pass a list's append).
      clock: the time source (tests pass a fake one); the same as `progress.started`'s.
    """

    def __init__(
        self,
        progress: TrainingProgress,
        summary_dir: Optional[str] = None,
        learning_rate_fn: Optional[LearningRateFn] = None,
        emit: Optional[Callable[[str], None]] = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._progress, self._summary_dir, self._learning_rate_fn = progress, summary_dir, learning_rate_fn
        self._emit = emit or log.info
        self._clock = clock
        self._fetches = {}

    def begin(self) -> None:
        step = tf.compat.v1.train.get_global_step()
        self._fetches = {"step": step}
        if self._learning_rate_fn is not None:
            self._fetches["learning_rate"] = self._learning_rate_fn(step)

    def before_run(self, run_context):
        original = run_context.original_args.fetches
        if isinstance(original, (list, tuple)) and len(original) == 2:  # Estimator.train: [train_op, loss]
            return tf.compat.v1.train.SessionRunArgs({"loss": original[1]})
        return None

    def after_run(self, run_context, run_values) -> None:
        now = self._clock()
        if self._summary_dir is None and not self._progress.due(now):
            return  # nothing to write: no second session.run (a user model on CPU runs one step per run)
        # The step is read after the run: fetched with the train op, it could be the value before the run's
        # steps (a loop of them, on a TPU and on CPU). TPUEstimator's own stop hook reads it the same way.
        values = run_context.session.run(self._fetches)
        step = int(values["step"])
        if step <= self._progress.start_step:
            return
        self._progress.measured(step, now)
        scalars = {"steps_per_second": self._progress.steps_per_second(step, now)}
        if "learning_rate" in values:
            scalars["learning_rate"] = float(values["learning_rate"])
        self._write(step, scalars)
        if self._progress.due(now):
            loss = float((run_values.results or {}).get("loss", math.nan))
            self._emit(self._progress.line(step, loss, now))

    def _write(self, step: int, scalars: dict) -> None:
        if self._summary_dir is None:
            return
        values = [tf.compat.v1.Summary.Value(tag=tag, simple_value=value) for tag, value in sorted(scalars.items())]
        writer = tf.compat.v1.summary.FileWriterCache.get(self._summary_dir)
        writer.add_summary(tf.compat.v1.Summary(value=values), step)
        writer.flush()
