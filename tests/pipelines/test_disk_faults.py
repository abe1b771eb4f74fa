"""A full or read-only disk met by the library's writes and by a local run's supervisor and runner, without a
pipeline run: what a refused write names and leaves behind, the reserve a run keeps for its last summary, a run
that cannot start, a refused log and a refused summary, the stage not started after them, what the next run's
start deletes, and the messages.

The disk is a real tmpfs where this machine lets the test mount one, and the fake file layer of
tests/disk_faults.py everywhere: the same checks run on both, which holds the fake to what the kernel does. Where
no tmpfs can be mounted the tmpfs cases are skipped and the fake's still run. Whole runs with a fault in each
stage: tests/e2e/test_disk_faults.py.
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

from estimator_lib import storage
from pipelines import runs
from pipelines.local.console import LogFile, append_unwritten
from pipelines.local.failures import ATTEMPT_MARKER, failure_message, refused_message
from pipelines.local.kfp_patches import fast_stage_exit
from pipelines.local.supervisor import unrecorded_message
from pipelines.run_summary import RunSummary

CAUSES = {FULL: "No space left on device", READ_ONLY: "Read-only file system"}
ERRNOS = {FULL: errno.ENOSPC, READ_ONLY: errno.EROFS}


@pytest.fixture(params=["tmpfs", "fake"])
def disk(request, tmp_path):
    if request.param == "tmpfs" and not disk_faults.can_mount(str(tmp_path / "probe")):
        pytest.skip("this machine may not mount a tmpfs; the fake file layer's case runs instead")
    layer = disk_faults.TmpfsDisk if request.param == "tmpfs" else disk_faults.FakeDisk
    made = layer(str(tmp_path / "disk"))
    os.makedirs(made.output)
    yield made
    made.close()


def output_of(code: str, disk: disk_faults._Disk) -> object:
    """What `code` (run under the disk's fault, `out` its output directory) printed as JSON."""
    proc = disk.python(f"import json, os\nout = {disk.output!r}\n{code}")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


WRITE = """
from estimator_lib import storage
try:
    storage.write_text(os.path.join(out, "summary.json"), "new")
except OSError as e:
    print(json.dumps([e.errno, e.filename]))
"""


@pytest.mark.parametrize("kind", [FULL, READ_ONLY])
def test_a_refused_write_names_its_file_not_the_temporary_and_leaves_the_old_file_whole(disk, kind):
    path = os.path.join(disk.output, "summary.json")
    storage.write_text(path, "old")
    disk.arm(Fault(kind))
    refused = output_of(WRITE, disk)
    disk.clear()
    assert refused == [ERRNOS[kind], path]
    assert storage.read_text(path) == "old" and os.listdir(disk.output) == ["summary.json"]


STAGING = """
from estimator_lib import storage
try:
    storage.local_staging_dir(os.path.join(out, "predictions"))
except OSError as e:
    print(json.dumps([e.errno, os.path.basename(e.filename)]))
"""


@pytest.mark.parametrize("kind", [FULL, READ_ONLY])
def test_a_staging_directory_the_disk_refuses_leaves_no_owner_record_behind(disk, kind):
    disk.arm(Fault(kind))
    refused = output_of(STAGING, disk)
    disk.clear()
    assert refused[0] == ERRNOS[kind] and re.fullmatch(r"\.staging-predictions-[0-9a-f]{12}\.owner", refused[1])
    assert os.listdir(disk.output) == []  # a half-written record would never be judged abandoned


def summary(status: str, stage=None, error=None) -> dict:
    """A run's summary as it starts (what `choose_run` writes), with this status, stage and error."""
    run = {
        "id": "r1",
        "dir": "/out/runs/r1",
        "log": "/out/runs/r1/pipeline.log",
        "started": "2026-01-01",
        "attempts": 1,
    }
    return {"status": status, "stage": stage, "error": error, "run": run, "config": {}}


PUBLISH = f"""
from pipelines import runs
from pipelines.run_summary import RunSummary
done = []
for run_id in ("without-reserve", "with-reserve"):
    folder = runs.RunFolder(out, run_id)
    try:
        runs.publish_summary(folder, RunSummary.from_dict({summary("failed", "train")!r}))
        done.append([folder.read_summary().to_dict(), os.path.exists(folder.reserve)])
    except OSError as e:
        done.append([e.errno, os.path.relpath(e.filename, out)])
print(json.dumps(done))
"""


def test_on_a_full_disk_a_runs_summary_is_written_from_the_space_it_reserved(disk):
    for run_id in ("without-reserve", "with-reserve"):
        runs.RunFolder(disk.output, run_id).create()
    runs.RunFolder(disk.output, "with-reserve").reserve_space()
    disk.arm(Fault(FULL))
    without, with_reserve = output_of(PUBLISH, disk)
    disk.clear()
    assert without == [errno.ENOSPC, "runs/without-reserve/summary.json"]
    assert with_reserve == [summary("failed", "train"), False]  # the reserve went to the summary
    assert runs.last_run(disk.output) == runs.RunFolder(disk.output, "with-reserve")


def test_a_run_that_finds_the_disk_full_does_not_start_and_says_why_in_one_line(disk):
    lock = runs.lock_output(disk.output)
    runs.record_holder(lock, "20260101T000000Z-earlier")  # an earlier run's lock file, not empty
    os.close(lock)
    # The CLI's own check creates an empty file, which a full disk still takes (it refuses the first byte); the
    # fake refuses at open, so there it refuses what this start writes first after that check, the reserve.
    disk.arm(Fault(FULL) if disk.layer == "tmpfs" else Fault(FULL, names=("space.reserve",)))
    command = [sys.executable, "-m", "pipelines", "run-local", "--output", disk.output]
    proc = subprocess.run(command, env=disk.env(), capture_output=True, text=True, timeout=120, check=False)
    disk.clear()
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    [run_id] = re.findall(r"cannot start run (\S+):", proc.stderr)
    assert proc.stderr == (
        f"tpu-pipeline run-local: error: cannot start run {run_id}: cannot write "
        f"{disk.output}/runs/{run_id}/space.reserve: No space left on device; nothing was run\n"
    )
    assert os.listdir(os.path.join(disk.output, "runs")) == []  # the new run's folder is deleted again


REFUSED_SUMMARY = """
import io
from pipelines import local, runs
from pipelines.local.console import Progress
from pipelines.local.supervisor import _finish
folder = runs.RunFolder(out, "r1")
progress = Progress(folder, folder.read_summary(), io.StringIO())
progress.line("00:24:04.300 - INFO - Executing task 'export-model'")
refusals = [progress.unrecorded, progress.refusal(), progress.refused]
failed = {"status": "failed", "stage": "export", "error": "cannot write x: y"}
ending = {"summary": {**folder.read_summary().to_dict(), **failed}}
try:
    _finish(folder, 1, None, ending)
except local.RecordError as e:
    print(json.dumps([refusals, str(e)]))
"""


@pytest.mark.parametrize("kind", [FULL, READ_ONLY])
def test_a_refused_summary_stops_the_run_and_the_error_says_where_its_last_good_record_is(disk, kind):
    folder = runs.RunFolder(disk.output, "r1")
    folder.create()
    runs.publish_summary(folder, RunSummary.from_dict(summary("running", "train")))
    disk.arm(Fault(kind))
    refusals, message = output_of(REFUSED_SUMMARY, disk)
    disk.clear()
    why = f"cannot write {folder.summary_path}: {CAUSES[kind]}"
    assert refusals == [["export", why], why, True]  # no further stage starts
    assert message.splitlines() == [
        "export: cannot write x: y",
        f"the run's summary could not be written ({why}); its last good record is {folder.summary_path} "
        "(status running, stage train)",
        f"full log: {folder.log}",
        "free space on that disk (or make it writable) and run the same command again: it resumes the run",
    ]
    assert folder.read_summary().status == "running"  # a later run resumes it


TRACEBACK = """    Traceback (most recent call last):
      File "/tmp/tmp.x/ephemeral_component.py", line 40, in train_model
    OSError: [Errno 28] No space left on device: '/out/runs/r1/train-model/stage.json'
"""


def test_a_log_the_disk_refuses_keeps_what_it_could_not_write_for_the_error_and_the_supervisor(tmp_path):
    refused = []
    log = LogFile("/dev/full", refused.append)  # the kernel's always-full device
    log.write(f"{ATTEMPT_MARKER}r1, attempt 1 ====\n")
    log.write(TRACEBACK + "partial")
    log.close()
    assert refused == ["cannot write /dev/full: No space left on device"]  # once
    assert log.unwritten() == f"{ATTEMPT_MARKER}r1, attempt 1 ====\n{TRACEBACK}partial"
    assert failure_message(str(tmp_path / "absent.log"), "train", log.unwritten()) == (
        "cannot write /out/runs/r1/train-model/stage.json: No space left on device"
    )
    path = tmp_path / "pipeline.log"
    path.write_text("written\ncut sho")  # the disk took part of a line
    append_unwritten(str(path), log.ending())
    assert path.read_text() == (
        "written\ncut sho\n==== the disk refused 5 lines of this log when they were logged (cannot write /dev/full: "
        f"No space left on device); they follow ====\n{ATTEMPT_MARKER}r1, attempt 1 ====\n{TRACEBACK}partial\n"
    )


def test_a_refused_log_keeps_its_last_lines_only(tmp_path):
    log = LogFile("/dev/full", lambda why: None, keep=2)
    log.write("".join(f"line {i}\n" for i in range(5)))
    assert log.unwritten() == "\nline 3\nline 4\n"  # a line break stands for the three left out
    path = tmp_path / "pipeline.log"
    append_unwritten(str(path), log.ending())
    assert path.read_text().splitlines()[0] == (
        "==== the disk refused 5 lines of this log when they were logged (cannot write /dev/full: No space left on "
        "device); the first 3 are lost, the others follow ===="
    )
    append_unwritten(str(path), LogFile(str(tmp_path / "other.log"), print).ending())  # none refused
    assert path.read_text().count("====") == 2


def test_no_stage_starts_once_a_record_of_the_run_was_refused(tmp_path):
    from kfp.local import subprocess_task_handler

    ran, exits = tmp_path / "ran", []
    with fast_stage_exit(exits.append, lambda: "cannot write /out/runs/r1/pipeline.log: Read-only file system"):
        assert subprocess_task_handler.run_local_subprocess(["touch", str(ran)]) == 1
    assert exits == [1] and not ran.exists()
    with fast_stage_exit(exits.append):
        assert subprocess_task_handler.run_local_subprocess(["touch", str(ran)]) == 0
    assert exits == [1, 0] and ran.exists()


def test_the_last_good_record_of_a_run_whose_summary_was_refused(tmp_path):
    folder = runs.RunFolder(str(tmp_path), "r1")
    error = OSError(errno.ENOSPC, "No space left on device", folder.summary_path)
    ok = RunSummary.from_dict(summary("ok"))
    assert unrecorded_message(folder, ok, error).splitlines()[:2] == [
        "run r1 finished ok",
        f"the run's summary could not be written (cannot write {folder.summary_path}: No space left on device); "
        "no record of run r1 was written",
    ]
    interrupted = RunSummary.from_dict(summary("interrupted", "train", "interrupted by SIGTERM"))
    assert unrecorded_message(folder, interrupted, error).splitlines()[0] == "interrupted by SIGTERM during train"


def test_a_runs_start_deletes_what_runs_the_disk_refused_left_and_keeps_everything_else(tmp_path):
    output = str(tmp_path)
    failed = runs.RunFolder(output, "r1")
    failed.create()
    failed.reserve_space()
    model = os.path.join(failed.pipeline_root, "p", "train-model", "model")
    left = [
        os.path.join(failed.path, "summary.json.tmp-" + "a" * 32),  # storage.write_bytes
        os.path.join(model, "graph.pbtxt.tmp" + "b" * 32),  # TensorFlow's atomic write
        os.path.join(model, "model.ckpt-20_temp", "part-00000-of-00001.data-00000-of-00001.tempstate1669258603765"),
        os.path.join(model, "model.ckpt-20.data-00000-of-00001.tempstate42"),
        os.path.join(failed.tmp, "tmp.abc", "ephemeral_component.py"),
    ]
    kept = [
        os.path.join(model, "model.ckpt-20.index"),
        os.path.join(model, "notes.tmp"),
        os.path.join(model, "warm_temp"),
        os.path.join(failed.path, "summary.json"),
    ]
    for path in left + kept:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        storage.write_text(path, "x")
    os.symlink(os.path.join("runs", "r1"), os.path.join(output, "latest.tmp-" + "c" * 32))  # runs.publish_summary
    runs.remove_leftovers(output)
    assert disk_faults.leftovers(output) == sorted(kept[1:3])  # look like temporaries, but are nobody's
    assert all(os.path.exists(path) for path in kept)
    assert not os.path.lexists(os.path.join(output, "latest.tmp-" + "c" * 32))
    assert not os.path.exists(os.path.join(model, "model.ckpt-20_temp"))


@pytest.mark.parametrize(
    "message, refused",
    [
        ("[Errno 28] No space left on device: '/out/x.json'", "cannot write /out/x.json: No space left on device"),
        ("[Errno 30] Read-only file system: '/out/a.tmp' -> '/out/a'", "cannot write /out/a: Read-only file system"),
        ("[Errno 122] Disk quota exceeded: '/out/x'", "cannot write /out/x: Disk quota exceeded"),
        ("[Errno 13] Permission denied: '/data/rows.csv'", "/data/rows.csv: Permission denied"),  # a read meets it
        ("/out/m/model.ckpt-20_temp/part-0.tempstate7; No space left on device", None),  # checked below
        (
            "[Errno 28] No space left on device",
            "cannot write a file: No space left on device (the error names none; the stage writes under /out/t)",
        ),
        ("[Errno 2] No such file or directory: '/data/rows.csv'", None),
        ("data.csv line 7, column 'x': 'abc' is not a number", None),
    ],
)
def test_a_refusal_in_pythons_or_tensorflows_words_becomes_one_line_of_ours(message, refused):
    if message.endswith("; No space left on device"):
        refused = "cannot write /out/m/model.ckpt-20_temp/part-0.tempstate7: No space left on device"
    assert refused_message(message, "/out/t") == refused


GRAPH_ERROR = """    Traceback (most recent call last):
      File "/tmp/tmp.x/ephemeral_component.py", line 40, in train_model
    tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:

    Detected at node 'save/SaveV2' defined at (most recent call last):
        File "/work/estimator_lib/estimator.py", line 9, in train
    Node: 'save/SaveV2'
    /out/model/model.ckpt-20_temp/part-00000-of-00001.data-00000-of-00001.tempstate167; No space left on device
    \t [[{{node save/SaveV2}}]]
"""


def test_tensorflows_graph_execution_error_is_reported_by_the_file_it_could_not_write(tmp_path):
    path = tmp_path / "pipeline.log"
    path.write_text(GRAPH_ERROR)
    assert failure_message(str(path), "train") == (
        "cannot write /out/model/model.ckpt-20_temp/part-00000-of-00001.data-00000-of-00001.tempstate167: "
        "No space left on device"
    )
