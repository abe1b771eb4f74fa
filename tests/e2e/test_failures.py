"""End to end: runs that fail or are killed leave nothing wrong behind (real KFP local runner, real TensorFlow).

  * a stage failing after training publishes nothing: LATEST stays where it was, the failure is one line;
  * SIGTERM during training stops every process of the run within 5 s and records the run as interrupted
    (tests/e2e/test_resume_faults.py, which then resumes it);
  * a run killed outright (SIGKILL to every process) during training and run again resumes in its folder and
    ends with variables bitwise equal to an uninterrupted training's.

Slow (each a partial or whole pipeline run): `pytest -m "not slow"` skips them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from estimator_lib import release
from pipelines import runs, stage

pytestmark = pytest.mark.slow

FAST = ["--set", "prepare.num_workers=1"]
SERVER_COMMAND = f"{sys.executable} -m {stage.SERVER_MODULE} "


def start_cli(output: str, *args: str) -> tuple[subprocess.Popen, str]:
    """`python -m pipelines run-local --output OUTPUT ...` in a session of its own; stdout and stderr to files."""
    log = os.path.join(os.path.dirname(output), os.path.basename(output) + ".console")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipelines", "run-local", "--output", output, *FAST, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    return proc, log


def run_cli(output: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "pipelines", "run-local", "--output", output, *FAST, *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def processes() -> dict[int, tuple[int, int, str]]:
    """{pid: (parent pid, process group, state)} of every process, from /proc (psutil is not installed)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(entry)] = (int(fields[1]), int(fields[2]), fields[0])
    return out


def command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", encoding="utf-8") as f:
            return f.read().replace("\0", " ")
    except OSError:
        return ""


def descendants(pid: int) -> set[int]:
    table, found, frontier = processes(), set(), {pid}
    while frontier:
        found |= frontier
        frontier = {p for p, (parent, _, _) in table.items() if parent in frontier} - found
    return found


def kill_tree(pid: int) -> None:
    """SIGKILLs `pid` and everything under it at once, as when the machine goes down. A process that exits on
    its own between the listing and its kill is simply gone; children started meanwhile are found by the next
    pass."""
    killed: set[int] = set()
    while pending := {p for p in descendants(pid) if processes().get(p, (0, 0, "Z"))[2] != "Z"} - killed:
        for p in pending:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed |= pending


def alive(pids: set[int], groups: set[int]) -> list[int]:
    """Processes (not zombies) among `pids` or in process groups `groups`."""
    return sorted(p for p, (_, group, state) in processes().items() if state != "Z" and (p in pids or group in groups))


def run_folder(output: str) -> runs.RunFolder:
    return wait_for(lambda: runs.last_run(output), 120, "the run folder")


def model_dir(folder: runs.RunFolder) -> str:
    return os.path.join(folder.pipeline_root, f"tpu-estimator-pipeline-{folder.run_id}", "train-model", "model")


def recorded_checkpoint_step(directory: str) -> int:
    """The step of the checkpoint the model directory's `checkpoint` state file names (-1: none yet). A
    checkpoint's files are written before that file names it: a kill in between leaves the previous one current."""
    latest = tf.train.latest_checkpoint(directory)
    return int(latest.rsplit("-", 1)[1]) if latest else -1


def wrong_schema_records(directory: str) -> str:
    """TFRecords from elsewhere: Examples whose features are not the penguins schema's."""
    os.makedirs(directory)
    with tf.io.TFRecordWriter(os.path.join(directory, "part-0.tfrecord")) as writer:
        for i in range(5):
            features = {"f_colour": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"red"]))}
            features["f_size"] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(i)]))
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
    return directory


def fake_saved_model(directory: str) -> str:
    os.makedirs(os.path.join(directory, "variables"))
    with open(os.path.join(directory, "saved_model.pb"), "wb") as f:
        f.write(b"graph")
    return directory


def test_a_failure_after_training_publishes_nothing_and_is_reported_in_one_line(tmp_path):
    """A wrong-schema TFRecord input (accepted by the checks: a directory of .tfrecord files) fails batch
    prediction, after export: LATEST stays on the version published before, no version is added."""
    output = str(tmp_path / "out")
    root = os.path.join(output, "published")
    before = release.publish_model(fake_saved_model(str(tmp_path / "older")), root)
    records = wrong_schema_records(str(tmp_path / "elsewhere"))
    proc = run_cli(output, "--predict-data", records, "--baseline", "none", "--set", "training.train_steps=20")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    first, second = proc.stderr.splitlines()[:2]
    assert first.startswith(f"tpu-pipeline run-local: error: batch_predict: DataError: {records}/part-0.tfrecord: ")
    assert (
        "feature(s) ['bill_depth_mm', 'bill_length_mm'" in first
        and "feature key(s) ['f_colour', 'f_size'] are not in the schema" in first
    )
    assert "Traceback" not in proc.stderr and "\x1b[" not in proc.stdout + proc.stderr
    summary = json.load(open(os.path.join(output, "summary.json"), encoding="utf-8"))
    assert summary["status"] == "failed" and summary["stage"] == "batch_predict"
    assert first.endswith(summary["error"]) and second == f"full log: {summary['run']['log']}"
    assert release.latest(root) == before
    assert os.listdir(os.path.join(root, "versions")) == [before.version]
    with open(summary["run"]["log"], encoding="utf-8") as f:
        assert "Traceback (most recent call last):" in f.read()  # the traceback is in the log


def test_a_run_killed_during_training_resumes_to_the_variables_of_an_uninterrupted_run(tmp_path):
    output = str(tmp_path / "out")
    args = ("--set", "training.train_steps=600", "--baseline", "none")
    proc, _ = start_cli(output, *args)
    try:
        folder = run_folder(output)
        wait_for(lambda: recorded_checkpoint_step(model_dir(folder)) >= 100, 600, "a recorded checkpoint")
        kill_tree(proc.pid)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_at = recorded_checkpoint_step(model_dir(folder))
    assert 100 <= killed_at < 600, "training was not interrupted"
    assert folder.read_summary().to_dict()["status"] == "running"  # nobody could record the end

    again = run_cli(output, *args)  # the same command: it resumes
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    summary = folder.read_summary().to_dict()
    assert summary["status"] == "ok" and summary["run"]["attempts"] == 2 and summary["run"]["id"] == folder.run_id
    assert "prepare" in summary["run"]["reused"] and "train" not in summary["run"]["reused"]
    assert f"run {folder.run_id}, attempt 2: finished stages are reused" in again.stdout
    with open(folder.log, encoding="utf-8") as f:
        second_attempt = f.read().split("attempt 2, started", 1)[1]
    restored = re.findall(r"Restoring parameters from \S*/model\.ckpt-(\d+)", second_attempt)
    assert restored and int(restored[0]) >= 100  # training continued from the checkpoint
    assert summary["model"]["trained_steps"] <= 600  # early stopping on the validation split may end it sooner

    from estimator_lib import estimator
    from estimator_lib.config import JobConfig
    from estimator_lib.data import prepare

    with open(os.path.join(model_dir(folder), "job_config.json"), encoding="utf-8") as f:
        job = JobConfig.from_json(f.read()).with_overrides({"tpu.strict": False})
    prepared = prepare.load_prepared(summary["artifacts"]["prepare"])
    reference = str(tmp_path / "uninterrupted")
    result = estimator.train_prepared(job, prepared, reference)  # the same rounds, uninterrupted
    assert result.trained_steps == summary["model"]["trained_steps"]
    resumed, whole = tf.train.load_checkpoint(model_dir(folder)), tf.train.load_checkpoint(reference)
    names = sorted(whole.get_variable_to_shape_map())
    assert names == sorted(resumed.get_variable_to_shape_map()) and len(names) > 10
    for name in names:
        assert resumed.get_tensor(name).tobytes() == whole.get_tensor(name).tobytes(), name
