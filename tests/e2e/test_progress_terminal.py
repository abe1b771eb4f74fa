"""Acceptance: `tpu-pipeline run-local` under a pseudo-terminal shows training's progress as one redrawn bar,
and the ETA it shows at a quarter of training is within half of the time the train stage actually has left.

The times are taken when the console's lines are read, as a person watching would see them. The stage's
output reaches the console through the runner's pipes: the bar is there only because the CLI tells the stages
that its console is a terminal (`components.records.CONSOLE_TTY_ENV`), so their progress lines come every
second instead of every 10 s.
"""

from __future__ import annotations

import fcntl
import glob
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from estimator_lib.progress import DURATION

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
# About 15-30 s of training on penguins: 12 rounds of 100 steps, each validated. Patience past the budget: the
# ETA is the budget's (an early stop would end the stage sooner, on purpose; its line is tested elsewhere).
SETTINGS = ("training.train_steps=1200", "training.early_stopping.patience=100")
BAR = re.compile(r"train: still running \([^)]*\): step (?P<step>\d+)/(?P<total>\d+) \(\d+%\), ETA (?P<eta>[\dhms]+)")


def seconds(text: str) -> int:
    parts = DURATION.fullmatch(text).groupdict(default="0")
    return 3600 * int(parts["h"]) + 60 * int(parts["m"]) + int(parts["s"])


def read_console(command, env, timeout: float = 600.0):
    """Runs `command` with a pseudo-terminal of 80 columns as its stdout and stderr; returns (exit code,
    [(time read, segment)]) with the output cut at line ends and carriage returns (a redrawn bar's frames)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    segments, pending, deadline = [], "", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1.0)[0]:
                continue
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the terminal's last writer has gone
                break
            if not data:
                break
            now = time.monotonic()
            *done, pending = re.split(r"[\r\n]", pending + data.decode("utf-8", "replace"))
            segments += [(now, part.replace("\x1b[K", "")) for part in done if part.strip()]
    finally:
        os.close(master)
    return proc.wait(timeout=60), segments


def test_the_eta_at_a_quarter_of_training_is_within_half_of_the_time_left_at_the_pace_so_far(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    command = [TPU_PIPELINE, "run-local", "--output", str(tmp_path / "out")]
    command += [arg for setting in SETTINGS for arg in ("--set", setting)]
    code, segments = read_console(command, env)
    text = "\n".join(segment for _, segment in segments)
    assert code == 0, text[-3000:]

    bars = [(t, BAR.search(segment)) for t, segment in segments if BAR.search(segment)]
    assert len(bars) >= 10, text[-3000:]  # a bar redrawn about every second while training runs
    read_at, quarter = next((t, m) for t, m in bars if int(m["step"]) >= 0.25 * int(m["total"]))
    done_at = next(t for t, segment in segments if re.search(r"\] train: done \(", segment))
    left, eta = done_at - read_at, seconds(quarter["eta"])
    # An ETA extrapolates the pace so far; when the machine's load changes later (a neighbouring test ends),
    # the time left changes with it. So the time left is scaled by the pace before the quarter over the pace
    # after it, each read from the bar (steps and when it showed them), from the first step shown on.
    first_at, first = bars[0][0], int(bars[0][1]["step"])
    done_steps, total = int(quarter["step"]), int(quarter["total"])
    before = (read_at - first_at) / (done_steps - first) if done_steps > first else None
    after = left / (total - done_steps)
    expected = left * (before / after) if before else left
    print(
        f"ETA at step {done_steps}/{total}: {eta} s; the stage ended {left:.1f} s later; at the pace so far "
        f"{expected:.1f} s ({before and before * 100:.2f} s per 100 steps before, {after * 100:.2f} after)"
    )
    assert abs(eta - expected) <= 0.5 * expected, (eta, expected, left, quarter.group(0))
    assert all(len(segment) <= 80 for _, segment in segments if BAR.search(segment))  # never wraps

    # TensorBoard: one event file per split, each written by one process: training's (loss, learning_rate,
    # steps_per_second) in the model directory over 12 rounds, validation's in eval_valid/, and the evaluate
    # stage's eval-split metrics in eval/.
    events = glob.glob(
        str(tmp_path / "out" / "runs" / "*" / "pipeline-root" / "*" / "train-model" / "model" / "**" / "events.*"),
        recursive=True,
    )
    assert sorted(os.path.basename(os.path.dirname(path)) for path in events) == ["eval", "eval_valid", "model"], events
