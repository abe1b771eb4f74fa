"""What `run-local` (and `submit`) check before anything starts: each fault exits with 2 and a message naming
the flag and the fix, without a stage having run."""

from __future__ import annotations

import os

import pytest

from pipelines import cli, runs


@pytest.fixture
def output(tmp_path):
    return str(tmp_path / "out")


def refused(capsys, *argv: str) -> str:
    """Runs the CLI, checks it exits with 2 and printed one error line; returns that line."""
    assert cli.main(list(argv)) == 2
    # Only the CLI's lines: a server thread another test left behind may write to stderr meanwhile.
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tpu-pipeline")]
    assert len(lines) == 1, lines
    return lines[0]


def test_output_must_be_a_writable_directory(tmp_path, capsys):
    assert refused(capsys, "run-local", "--output", "") == (
        "tpu-pipeline run-local: error: --output is empty; give the directory for the run's outputs, "
        "e.g. --output runs/local"
    )
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert refused(capsys, "run-local", "--output", str(afile)) == (
        f"tpu-pipeline run-local: error: --output {afile}: is a file, not a directory; give a directory (created "
        "if missing)"
    )
    line = refused(capsys, "run-local", "--output", "/proc/tpu-pipeline-out")  # not writable, even for root
    assert line.startswith("tpu-pipeline run-local: error: --output /proc/tpu-pipeline-out: cannot write in /proc (")
    assert line.endswith("); give a directory you can write to")
    assert refused(capsys, "run-local", "--output", str(afile / "out")) == (
        f"tpu-pipeline run-local: error: --output {afile / 'out'}: {afile} is a file, not a directory; give a directory"
    )


def test_publish_root_must_be_a_directory(tmp_path, output, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for root in (afile, afile / "sub"):
        assert refused(capsys, "run-local", "--output", output, "--publish-root", str(root)) == (
            f"tpu-pipeline run-local: error: --publish-root {root}: {afile} is a file, not a directory; give a "
            "directory"
        )
    assert not os.path.exists(output)  # nothing was written


def test_data_and_predict_data_must_exist(tmp_path, output, capsys, monkeypatch):
    missing = tmp_path / "nope.csv"
    assert refused(capsys, "run-local", "--output", output, "--data", str(missing), "--label", "y") == (
        f"tpu-pipeline run-local: error: --data {missing}: no such file (nothing matches); give a CSV or JSON "
        "Lines file or glob"
    )
    assert refused(capsys, "run-local", "--output", output, "--data", str(tmp_path), "--label", "y") == (
        f"tpu-pipeline run-local: error: --data {tmp_path}: is a directory; give a file or a glob, e.g. "
        f"{tmp_path}/*.csv"
    )
    monkeypatch.chdir(tmp_path)
    assert refused(capsys, "run-local", "--output", output, "--predict-data", "evl") == (
        f"tpu-pipeline run-local: error: --predict-data '{tmp_path}/evl' is neither a prepared split (train, eval, "
        "test, valid) nor a directory holding *.tfrecord or *.tfrecords or *.tf_record or *.tfrec files; did you "
        "mean 'eval'?"
    )
    assert refused(capsys, "run-local", "--output", output, "--predict-data", "new/*.csv") == (
        f"tpu-pipeline run-local: error: --predict-data {tmp_path}/new/*.csv: no such file (nothing matches); give "
        "existing files or a split"
    )


def test_a_missing_config_file_names_the_flag(tmp_path, output, capsys):
    assert refused(capsys, "run-local", "--output", output, "--config", str(tmp_path / "c.json")) == (
        f"tpu-pipeline run-local: error: --config {tmp_path / 'c.json'}: no such file; give the path of a JSON "
        "config file"
    )


def test_batch_sizes_must_divide_over_the_targeted_tpu_cores(output, capsys):
    line = refused(capsys, "run-local", "--output", output, "--set", "training.train_batch_size=12")
    assert line == (
        "tpu-pipeline run-local: error: training.train_batch_size=12 is not divisible by tpu.num_cores=8 (the TPU "
        "replicas): use a multiple of 8, e.g. 8 (run-local checks for a TPU of tpu.num_cores=8; set tpu.num_cores)"
    )
    image = "gcr.io/p/img@sha256:" + "0" * 64
    argv = ["submit", "--project", "p", "--pipeline-root", "gs://b/r", "--image", image, "--dry-run"]
    line = refused(capsys, *argv, "--tpu", "v2-8", "--set", "training.eval_batch_size=12")
    assert line.startswith(
        "tpu-pipeline submit: error: training.eval_batch_size=12 is not divisible by tpu.num_cores=8"
    )
    assert line.endswith("(--tpu v2-8)")


def test_an_output_in_use_is_refused(output, capsys):
    os.makedirs(output)
    fd = runs.lock_output(output)
    try:
        runs.record_holder(fd, "20260101T000000Z-abcdef")
        line = refused(capsys, "run-local", "--output", output)
    finally:
        os.close(fd)
    assert line.startswith(
        f"tpu-pipeline run-local: error: --output {output} is in use by run 20260101T000000Z-abcdef (pid {os.getpid()}"
    )


def test_resume_without_a_run_to_resume_is_refused(output, capsys):
    assert refused(capsys, "run-local", "--output", output, "--resume") == (
        f"tpu-pipeline run-local: error: --resume: {output} holds no failed or interrupted run to resume"
    )
    assert not os.path.exists(output)  # a refused command line writes nothing
