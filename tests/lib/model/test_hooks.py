"""Training progress lines: cadence, step, loss, rate and ETA, from a real CPU training run."""

from __future__ import annotations

import logging
import re

import synthetic
import tensorflow as tf

from estimator_lib import estimator
from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
from estimator_lib.model import inputs
from estimator_lib.model.hooks import ProgressHook

JOB = JobConfig(  # 30 steps of 8 rows; a session run trains 10 of them
    tpu=TPUSettings(iterations_per_loop=10),
    training=TrainingConfig(train_batch_size=8, train_steps=30, save_checkpoints_steps=10),
)


def binary_data(tmp_path):
    """(schema, pattern): 64 rows of the synthetic binary dataset in 2 shards."""
    schema = synthetic.make_schema("binary")
    pattern, _ = synthetic.write_dataset(str(tmp_path / "d"), synthetic.make_rows(64, 3), schema, 2)
    return schema, pattern


def train_with_hooks(tmp_path, hooks) -> None:
    """Trains JOB's estimator to step 30 on `binary_data`, with `hooks`."""
    schema, pattern = binary_data(tmp_path)
    train_input = inputs.train_input_fn_builder(pattern, schema, seed=1, shuffle_buffer_size=16)
    estimator.build_estimator(JOB, schema, str(tmp_path / "model")).train(train_input, max_steps=30, hooks=hooks)


class Clock:
    """One second passes per reading."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_progress_lines_come_at_the_cadence_with_loss_rate_and_eta(tmp_path):
    lines = []
    hook = ProgressHook(total_steps=30, global_batch_size=8, every_seconds=10, emit=lines.append, clock=Clock())
    train_with_hooks(tmp_path, [hook])

    pattern_ = r"step (\d+)/30 \((\d+)%\), loss ([0-9.e+-]+), (\d+) examples/s, ETA (\S+)"
    parsed = [re.fullmatch(pattern_, line) for line in lines]
    assert all(parsed), lines
    steps = [int(m.group(1)) for m in parsed]
    # One reading per step (the step as the step starts) and a line every 10 readings, then one at the end.
    assert steps == [10, 20, 30]
    assert [int(m.group(2)) for m in parsed] == [33, 67, 100]
    assert all(0 < float(m.group(3)) < 5 for m in parsed)
    assert int(parsed[0].group(4)) == 8  # one step of 8 examples per (fake) second
    assert parsed[0].group(5) == "20s" and parsed[-1].group(5) == "0s"


def test_the_last_line_gives_the_whole_calls_rate(tmp_path):
    """A slow last stretch (a final checkpoint, a round of two steps) does not make the closing rate look low."""
    clock, lines = Clock(), []
    hook = ProgressHook(total_steps=30, global_batch_size=8, every_seconds=10, emit=lines.append, clock=clock)
    slow_end = SlowEnd(clock)
    train_with_hooks(tmp_path, [slow_end, hook])  # hooks end in list order
    rates = [int(re.search(r"(\d+) examples/s", line).group(1)) for line in lines]
    # 30 readings a second apart, then 20 s of closing work: 30 steps of 8 rows over 50 s, not 10 over 30 s.
    assert rates[:2] == [8, 8] and rates[-1] == 5


class SlowEnd(tf.compat.v1.train.SessionRunHook):
    """Makes 20 (fake) seconds pass when training ends, before the progress hook's last line."""

    def __init__(self, clock: Clock):
        self.clock = clock

    def end(self, session) -> None:
        self.clock.now += 20.0


def test_estimator_train_logs_progress_to_the_budget(tmp_path, caplog):
    """`estimator.train` runs the hook: its last line reports the budget reached (a short run, so only the final
    line falls due; the cadence is the test above)."""
    schema, pattern = binary_data(tmp_path)
    caplog.set_level(logging.INFO, logger="estimator_lib.progress")
    estimator.train(JOB, schema, pattern, str(tmp_path / "model"))
    lines = [r.getMessage() for r in caplog.records if r.name == "estimator_lib.progress"]
    assert lines and re.fullmatch(r"step 30/30 \(100%\), loss [0-9.e+-]+, [\d,]+ examples/s, ETA 0s", lines[-1])
