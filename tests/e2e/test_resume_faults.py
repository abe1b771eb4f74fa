"""End to end: a run stopped by SIGTERM during training stops every process within 5 s and is recorded as
interrupted; its last TensorBoard event file then cut short mid-record (what a kill can leave), it resumes to a
report with its loss curves.

Slow (a run interrupted, then resumed to its end): `pytest -m "not slow"` skips it.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from estimator_lib import summaries
from pipelines import runs
from tests.e2e.test_failures import SERVER_COMMAND, alive, command, descendants, model_dir, processes, wait_for

pytestmark = pytest.mark.slow

ARGS = ["--set", "prepare.num_workers=1", "--set", "training.train_steps=600", "--baseline", "none"]


def run_local(output: str, **popen) -> subprocess.Popen:
    command = [sys.executable, "-m", "pipelines", "run-local", "--output", output, *ARGS]
    return subprocess.Popen(command, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), text=True, **popen)


def test_sigterm_during_training_stops_every_process_within_5_s_and_the_run_resumes_to_a_report_with_its_curves(
    tmp_path,
):
    output, console = str(tmp_path / "out"), str(tmp_path / "console")
    with open(console, "w") as out:
        proc = run_local(output, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        folder = wait_for(lambda: runs.last_run(output), 120, "the run folder")
        model = model_dir(folder)
        wait_for(lambda: tf.train.latest_checkpoint(model), 600, "a checkpoint")
        # KFP writes each stage's program under the run's TMPDIR, not /tmp.
        assert glob.glob(os.path.join(folder.tmp, "tmp.*", "ephemeral_component.py"))
        family = descendants(proc.pid)
        groups = {processes()[p][1] for p in family if p in processes()}
        assert len(family) >= 4 and len(groups) == 2  # the CLI; the runner and the stage, in the runner's group
        assert any(command(p).startswith(SERVER_COMMAND) for p in family)  # the stage server, in the same group
        proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        code = proc.wait(timeout=60)
        wait_for(lambda: not alive(family, groups), 5 - (time.monotonic() - stopped), "every process to end")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 128 + signal.SIGTERM
    summary = folder.read_summary().to_dict()
    assert summary["status"] == "interrupted" and summary["stage"] == "train"
    assert summary["error"] == "interrupted by SIGTERM" and summary["run"]["ended"]
    with open(console, encoding="utf-8") as f:
        assert "tpu-pipeline run-local: interrupted by SIGTERM during train\n" in f.read()
    assert not os.path.exists(folder.tmp)

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
