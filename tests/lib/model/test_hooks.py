"""Training progress from a real CPU training run: the lines' cadence, step, loss, rate and ETA, and the
TensorBoard scalars, in one event file."""

from __future__ import annotations

import glob
import logging
import os
import re

import synthetic
import tensorflow as tf

from estimator_lib import estimator
from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
from estimator_lib.model import inputs
from estimator_lib.model.hooks import ProgressHook
from estimator_lib.progress import TrainingProgress

JOB = JobConfig(  # 30 steps of 8 rows; a session run trains 10 of them
    tpu=TPUSettings(iterations_per_loop=10),
    training=TrainingConfig(train_batch_size=8, train_steps=30, save_checkpoints_steps=10),
)


def binary_data(tmp_path):
    """(schema, pattern): 64 rows of the synthetic binary dataset in 2 shards."""
    schema = synthetic.make_schema("binary")
    pattern, _ = synthetic.write_dataset(str(tmp_path / "d"), synthetic.make_rows(64, 3), schema, 2)
    return schema, pattern


def train_with_hooks(tmp_path, hooks, target_step=30) -> str:
    """Trains JOB's estimator to step `target_step` on `binary_data`, with `hooks`; returns the model directory."""
    schema, pattern = binary_data(tmp_path)
    train_input = inputs.train_input_fn_builder(pattern, schema, seed=1, shuffle_buffer_size=16)
    model_dir = str(tmp_path / "model")
    estimator.build_estimator(JOB, schema, model_dir, target_step=target_step).train(
        train_input, max_steps=target_step, hooks=hooks
    )
    return model_dir


class Clock:
    """One second passes per reading."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def event_scalars(directory):
    """({tag: [step, ...]}, number of event files) of the event files directly in `directory`."""
    files = glob.glob(os.path.join(directory, "events.out.tfevents.*"))
    tags = {}
    for path in files:
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    return tags, len(files)


def test_lines_come_at_the_cadence_and_the_rate_spans_the_train_calls(tmp_path):
    """Two `train()` calls (as two rounds) share one progress: the second call's rate counts from the first
    call's start, and a line is due every 10 s across calls. One session run (10 steps) per fake second."""
    clock, lines = Clock(), []
    progress = TrainingProgress(budget=60, batch_size=8, start_step=0, started=0.0, every_seconds=2)
    train_with_hooks(tmp_path, [ProgressHook(progress, emit=lines.append, clock=clock)], target_step=30)
    train_with_hooks(tmp_path, [ProgressHook(progress, emit=lines.append, clock=clock)], target_step=60)
    pattern = r"step (\d+)/60 \((\d+)%\), ETA (\S+), loss ([0-9.e+-]+), ([\d.]+) steps/s \((\d+) examples/s\)"
    parsed = [re.fullmatch(pattern, line) for line in lines]
    assert all(parsed), lines
    # Readings at 1..6 s after steps 10..60: a line at the first and then every 2 s.
    assert [(m[1], m[2], m[3], m[5], m[6]) for m in parsed] == [
        ("10", "17", "5s", "10.0", "80"),
        ("30", "50", "3s", "10.0", "80"),
        ("50", "83", "1s", "10.0", "80"),
    ]
    assert all(0 < float(m[4]) < 5 for m in parsed)


def test_training_leaves_one_event_file_with_one_loss_tag_and_the_rate(tmp_path):
    """Estimator writes `loss` (every save_summary_steps and at the end), the hook the learning rate and steps/s
    after each session run, all through the writer Estimator caches for the model directory: one event file,
    where the model's own host_call wrote a file per `train()` call and a second loss tag ("loss_1")."""
    schema, pattern = binary_data(tmp_path)
    model_dir = str(tmp_path / "model")
    job = JOB.with_overrides({"training.train_steps": 30})
    estimator.train(job, schema, pattern, model_dir)
    tags, files = event_scalars(model_dir)
    assert files == 1
    assert sorted(tags) == ["learning_rate", "loss", "steps_per_second"]
    assert tags["steps_per_second"] == tags["learning_rate"] == [10, 20, 30]


def test_estimator_train_logs_progress_and_the_whole_stages_rate(tmp_path, caplog):
    schema, pattern = binary_data(tmp_path)
    caplog.set_level(logging.INFO, logger="estimator_lib")
    estimator.train(JOB, schema, pattern, str(tmp_path / "model"))
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("estimator_lib")]
    progress = [line for line in lines if line.startswith("step ")]
    assert progress and re.fullmatch(r"step 10/30 \(33%\), ETA \S+, loss [0-9.e+-]+, [\d.,]+ steps/s .*", progress[0])
    assert re.fullmatch(r"trained to step 30 in \d+s \([\d.]+ steps/s, validation included\)", lines[-1])
