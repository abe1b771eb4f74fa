"""Run folders: the lock on OUTPUT, the last run's summary and link, and what killed runs leave behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from estimator_lib import storage
from pipelines import runs
from pipelines.run_summary import RunInfo, RunSummary


def test_a_second_run_into_an_output_in_use_is_refused_naming_the_holder(tmp_path):
    output = str(tmp_path)
    fd = runs.lock_output(output)
    runs.record_holder(fd, "20260101T000000Z-abcdef")
    # Another process (another run) tries: flock locks belong to open files, so a second open in this process
    # would be refused too; a real second process shows the message users see.
    code = f"from pipelines import runs; runs.lock_output({output!r})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert (
        f"OutputInUseError: --output {output} is in use by run 20260101T000000Z-abcdef (pid {os.getpid()}, "
        "started " in proc.stderr
    )
    assert "wait for it to end, or give another --output" in proc.stderr
    os.close(fd)
    os.close(runs.lock_output(output))  # released: the next run takes it


def test_the_last_runs_summary_is_copied_and_linked_in_one_step_each(tmp_path):
    output = str(tmp_path)
    assert runs.last_run(output) is None
    first, second = runs.RunFolder(output, "r1"), runs.RunFolder(output, "r2")
    for folder, status in ((first, "ok"), (second, "failed")):
        folder.create()
        run = RunInfo(folder.run_id, folder.path, folder.log, "2026-01-01T00:00:00+00:00", attempts=1)
        runs.publish_summary(folder, RunSummary(status=status, stage=None, error=None, run=run, config={}))
    assert runs.last_run(output) == second
    assert os.readlink(os.path.join(output, "latest")) == os.path.join("runs", "r2")
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        assert json.load(f) == second.read_summary().to_dict()
    assert second.read_summary().status == "failed" and first.read_summary().status == "ok"  # each keeps its own
    assert sorted(os.listdir(output)) == ["latest", "runs", "summary.json"]  # no temporary names left


def test_leftovers_of_killed_runs_are_removed_and_those_of_live_processes_kept(tmp_path):
    output = str(tmp_path)
    folder = runs.RunFolder(output, "r1")
    folder.create()
    (tmp_path / "runs" / "r1" / "tmp" / "tmp.abc").mkdir()
    destination = os.path.join(folder.pipeline_root, "p", "batch-predict", "predictions")
    live = storage.local_staging_dir(destination)  # owned by this process
    dead = subprocess.run(
        [sys.executable, "-c", f"from estimator_lib import storage; print(storage.local_staging_dir({destination!r}))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()  # its owner exited without cleaning up, as a killed stage does
    assert os.path.isdir(dead) and os.path.isdir(live)
    runs.remove_leftovers(output)
    assert not os.path.exists(folder.tmp)
    assert not os.path.exists(dead) and not os.path.exists(dead + ".owner")
    assert os.path.isdir(live)
    storage.discard_staging(live)


def test_run_ids_sort_by_time_and_differ():
    a, b = runs.RunFolder.new("/o"), runs.RunFolder.new("/o")
    assert a.run_id != b.run_id and a.run_id[:16] <= b.run_id[:16]
    assert len(a.run_id) == len("20260101T000000Z-abcdef")
    with pytest.raises(FileNotFoundError):
        runs.RunFolder("/nonexistent", "x").read_summary()
