"""End to end: a full or read-only disk at each stage of a local run (real KFP local runner, real TensorFlow), on a
real small tmpfs where this machine can mount one, else on the fake file layer of tests/disk_faults.py.

  * a disk that fills up in a stage fails the run (exit 1) in one line naming the stage, the file and the cause;
    the summary says failed at that stage; the same command again resumes the run past that stage. One run meets
    a full disk in each stage in turn (each attempt resumes the stage the last one failed in, then fills up in
    the next); the last attempt, the disk cleared, publishes and leaves no temporary file;
  * an output that turns read-only in the first stage, in training (TensorFlow's own writes) and in the release
    fails the run (exit 1) in one line naming the stage, the file and the cause, then says that the summary could
    not be written and where the last good record is (status running at that stage); a new run's start deletes
    what the failed run could not (its tmp/, its reserve), and the run failed in the release resumes and
    publishes. Which stage's write is refused is the full disk's case above, stage by stage; what a read-only
    output adds (the refused summary and what the next run deletes) is the runner's, the same whichever stage
    met it;
  * a refusal only one stage meets (EACCES on its files), a log refused from the start, and a summary refused once
    the pipeline has published each fail the run; the next attempt resumes past them and ends ok. Only the fake
    layer can refuse so narrowly (root ignores permission bits; a real disk refuses every file alike).

Slow (about three whole runs and a dozen restarts: a few minutes on 2 cores): `pytest -m "not slow"` skips them.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys

import disk_faults
import pytest
from disk_faults import FULL, READ_ONLY, Fault

from pipelines import runs

pytestmark = pytest.mark.slow

# Blessed (no baseline, no reference margin) so that every run that ends ok publishes; 20 steps keep it short.
ARGS = ["--baseline", "none", "--set", "blessing.reference_margin=null", "--set", "training.train_steps=20"]
ARGS += ["--set", "prepare.num_workers=1"]
# Where in each stage its fault fires: after the stage's first `skip` files written (its stage record is the
# first; resolve's only one is KFP's executor output), or in train once its first checkpoint is on disk, so that
# the next write is TensorFlow's own. In the order the local runner runs the stages (the full disk's run meets
# them one attempt after another).
POINTS = {
    "resolve": {"skip": 0},
    "prepare": {"skip": 1},
    "train": {"after": "**/model.ckpt-0.index"},
    "export": {"skip": 2},
    "evaluate": {"skip": 2},
    "batch_predict": {"skip": 1},
    "serving_check": {"skip": 1},
    "release": {"skip": 1},
}
# The read-only case's stages: the first, the one whose refused write is TensorFlow's, and the last.
READ_ONLY_STAGES = ("resolve", "train", "release")
CAUSES = {FULL: "No space left on device", READ_ONLY: "Read-only file system"}


@pytest.fixture
def disk(tmp_path):
    made = disk_faults.make_disk(str(tmp_path / "disk"))
    yield made
    made.close()


def run_cli(disk: disk_faults._Disk, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pipelines", "run-local", "--output", disk.output, *ARGS, *args]
    return subprocess.run(command, env=disk.env(), capture_output=True, text=True, timeout=900, check=False)


def run_of(proc: subprocess.CompletedProcess, disk: disk_faults._Disk) -> runs.RunFolder:
    return runs.RunFolder(disk.output, re.match(r"run ([^\s,]+)", proc.stdout)[1])


def versions(disk: disk_faults._Disk) -> list[str]:
    root = os.path.join(disk.output, "published", "versions")
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def failed_in_one_line(proc: subprocess.CompletedProcess, stage: str, cause: str, disk: disk_faults._Disk) -> str:
    """The CLI's first line: the stage, the file under the output (or where the stage writes, when the error
    names no file: a write into an open file) and the cause; nothing else failed loudly. Its error part."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    first = proc.stderr.splitlines()[0]
    found = re.fullmatch(
        rf"tpu-pipeline run-local: error: {stage}: (?P<error>cannot write (?:(?P<path>/\S+)|a file): {cause}"
        r"(?: \(the error names none; the stage writes under (?P<under>/\S+)\))?)",
        first,
    )
    assert found, first
    assert (found["path"] or found["under"]).startswith(disk.output + os.sep), first
    return found["error"]


def publishes(disk: disk_faults._Disk, *args: str) -> subprocess.CompletedProcess:
    """The next run, with the fault removed, ends ok, releases, and leaves no temporary file. It publishes a
    version, or, where an earlier stage's run already published the model it retrains (the same data and seed
    give the same model), says the model is identical to the published one and publishes nothing twice."""
    before = versions(disk)
    proc = run_cli(disk, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    published = len(versions(disk)) == len(before) + 1 and "published version" in proc.stdout
    identical = before and versions(disk) == before and "identical to version" in proc.stdout
    assert published or identical, proc.stdout
    assert disk_faults.leftovers(disk.output) == []
    return proc


def test_a_disk_that_fills_up_in_any_stage_fails_the_run_in_one_line_and_the_same_command_resumes_it(disk):
    folder = None
    for attempt, (stage, point) in enumerate(POINTS.items(), start=1):
        disk.arm(Fault(FULL, stage, **point))
        proc = run_cli(disk)  # the same command each time: after the first, it resumes the failed run
        disk.clear()
        error = failed_in_one_line(proc, stage, CAUSES[FULL], disk)
        folder = folder or run_of(proc, disk)
        assert run_of(proc, disk) == folder, f"{stage}: the same command resumes the failed run"
        summary = folder.read_summary().to_dict()
        assert (summary["status"], summary["stage"], summary["error"]) == ("failed", stage, error)
        assert summary["run"]["attempts"] == attempt  # it got past the stage the attempt before failed in
        with open(folder.log, encoding="utf-8") as f:
            log = f.read()
        # The stage's traceback: written then, or (the full disk refused the log's lines too, unless the failed
        # stage had freed space deleting its staging directory) appended once the summary was.
        assert CAUSES[FULL] in log
    resumed = publishes(disk)
    assert run_of(resumed, disk) == folder, "the same command resumes the failed run"


def test_an_output_that_turns_read_only_fails_the_run_and_says_where_its_last_good_record_is(disk):
    before = None  # the run the last read-only output failed, when the next one starts a new run
    for stage in READ_ONLY_STAGES:
        disk.arm(Fault(READ_ONLY, stage, **POINTS[stage]))
        proc = run_cli(disk, *(["--no-resume"] if before else []))
        disk.clear()
        failed_in_one_line(proc, stage, CAUSES[READ_ONLY], disk)
        folder = run_of(proc, disk)
        assert proc.stderr.splitlines()[1] == (
            f"the run's summary could not be written (cannot write {folder.summary_path}: Read-only file system); "
            f"its last good record is {folder.summary_path} (status running, stage {stage})"
        )
        assert folder.read_summary().to_dict()["status"] == runs.RUNNING  # the same command resumes it
        assert os.path.exists(folder.reserve) and os.path.isdir(folder.tmp)  # the read-only disk kept them
        if before is not None:  # a new run's start deleted them
            assert folder != before and not os.path.exists(before.reserve) and not os.path.exists(before.tmp)
        # A new run (where it costs little more than resuming) after a failure before training's end; a resumed
        # one after the release's.
        before = folder if stage in ("resolve", "train") else None
    assert run_of(publishes(disk), disk) == folder


def test_a_refusal_one_stage_meets_a_refused_log_and_a_refused_summary_each_fail_the_run_until_it_resumes(tmp_path):
    disk = disk_faults.make_disk(str(tmp_path / "disk"), layer="fake")
    try:
        disk.arm(Fault(errno.EACCES, "export", skip=2, scope="stage"))  # the export stage's own files only
        proc = run_cli(disk)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert re.fullmatch(
            rf"tpu-pipeline run-local: error: export: {re.escape(disk.output)}/\S+: Permission denied",
            proc.stderr.splitlines()[0],
        )
        assert runs.last_run(disk.output).read_summary().to_dict()["stage"] == "export"

        disk.arm(Fault(errno.EACCES, names=("pipeline.log",)))  # the runner cannot open the log
        proc = run_cli(disk)
        folder = run_of(proc, disk)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert proc.stderr.splitlines()[0] == (
            f"tpu-pipeline run-local: error: runner: cannot write {folder.log}: Permission denied"
        )
        assert folder.read_summary().to_dict()["run"]["reused"] == []  # no stage started

        disk.arm(Fault(READ_ONLY, "release", names=("summary.json",)))  # from the release stage on
        proc = run_cli(disk)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr and len(versions(disk)) == 1
        assert proc.stderr.splitlines()[:2] == [
            f"tpu-pipeline run-local: error: run {folder.run_id} finished ok",
            f"the run's summary could not be written (cannot write {folder.summary_path}: Read-only file system); "
            f"its last good record is {folder.summary_path} (status running, stage release)",
        ]

        disk.clear()
        proc = run_cli(disk)
        assert proc.returncode == 0, proc.stderr
        summary = json.loads(open(folder.summary_path, encoding="utf-8").read())
        assert summary["status"] == "ok" and summary["export"]["published"] and summary["run"]["attempts"] == 4
        assert disk_faults.leftovers(disk.output) == []
    finally:
        disk.close()
