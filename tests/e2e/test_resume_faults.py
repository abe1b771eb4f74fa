"""End to end: a run stopped by SIGTERM during training, its last TensorBoard event file then cut short mid-record
(what a kill can leave), resumes to a report with its loss curves.

Slow (a run interrupted, then resumed to its end): `pytest -m "not slow"` skips it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from estimator_lib import summaries
from pipelines import runs

pytestmark = pytest.mark.slow

ARGS = ["--set", "prepare.num_workers=1", "--set", "training.train_steps=600", "--baseline", "none"]


def run_local(output: str, **popen) -> subprocess.Popen:
    command = [sys.executable, "-m", "pipelines", "run-local", "--output", output, *ARGS]
    return subprocess.Popen(command, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), text=True, **popen)


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_a_run_stopped_during_training_resumes_to_a_report_with_its_curves_whatever_its_last_event_file(tmp_path):
    output = str(tmp_path / "out")
    with open(tmp_path / "console", "w") as console:
        proc = run_local(output, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        folder = wait_for(lambda: runs.last_run(output), 120, "the run folder")
        model = os.path.join(folder.pipeline_root, f"tpu-estimator-pipeline-{folder.run_id}", "train-model", "model")
        wait_for(lambda: tf.train.latest_checkpoint(model), 600, "a checkpoint")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    [*_, last] = sorted(summaries.event_files(model), key=os.path.getmtime)
    with open(last, "r+b") as f:  # cut inside its last record
        f.truncate(os.path.getsize(last) - 7)

    with run_local(output, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as again:
        printed = again.communicate(timeout=900)[0]
    assert again.returncode == 0, printed[-3000:]
    summary = folder.read_summary().to_dict()
    assert summary["status"] == "ok" and summary["run"]["attempts"] == 2 and "train" not in summary["run"]["reused"]
    with open(folder.report, encoding="utf-8") as f:
        assert '<section id="curves">' in f.read()
