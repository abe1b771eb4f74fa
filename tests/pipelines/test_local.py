"""The local runner's parts that need no pipeline run: the console and the log, the failed stage's error, the
fixed artifact directory of a run's attempts, and which run folder a run goes to. Runs through the real KFP
local runner are in tests/e2e/."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import time

import pytest
from fakes import Clock, Terminal

from pipelines import local, runs
from pipelines.local.console import _ANSI, ConsoleFilter, Progress
from pipelines.local.failures import failure_excerpt, failure_message
from pipelines.local.kfp_patches import fixed_run_directory, stage_of
from pipelines.local.summary import data_summary
from pipelines.local.supervisor import _process_table, choose_run, group_members, stop_orphans
from pipelines.run_summary import RunInfo, RunSummary

RUNNER_OUTPUT = """00:24:01.571 - INFO - Executing task \x1b[96m'prepare-data'\x1b[0m
00:24:01.572 - INFO - Streamed logs:

    [KFP Executor 2026-11-22 00:22:54,065 WARNING]: From model_fn.py:28: deprecated
    [stage reused] prepare: inputs unchanged since 2026-11-22T00:20:00+00:00
00:24:04.276 - INFO - Task \x1b[96m'prepare-data'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m
00:24:04.277 - INFO - Task \x1b[96m'prepare-data'\x1b[0m outputs:
    dataset: Dataset( name='dataset',
00:24:04.300 - INFO - Executing task \x1b[96m'train-model'\x1b[0m
    Traceback (most recent call last):
      File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main
        return _run_code(code, main_globals, None,
      File "/tmp/tmp.x/ephemeral_component.py", line 40, in train_model
        result = estimator.train(job, prepared.schema, prepared.files("train"), model.uri)
    estimator_lib.data.common.DataError: data.csv line 7, column 'x': 'abc' is not a number
    (the column is numeric)

00:24:09.330 - ERROR - Task \x1b[96m'train-model'\x1b[0m finished with status \x1b[91mFAILURE\x1b[0m
00:24:09.331 - ERROR - Pipeline \x1b[95m'tpu-estimator-pipeline'\x1b[0m finished with status \x1b[91mFAILURE\x1b[0m
"""


def folder_with_summary(tmp_path) -> runs.RunFolder:
    """A run folder whose summary says the run started."""
    folder = runs.RunFolder.new(str(tmp_path))
    folder.create()
    run = RunInfo(folder.run_id, folder.path, folder.log, "2026-11-22T00:24:00+00:00", attempts=1)
    folder.write_summary(RunSummary(status=runs.RUNNING, stage=None, error=None, run=run, config={}))
    return folder


def test_the_console_shows_one_line_per_stage_event_and_the_log_everything_without_colour_codes(tmp_path):
    folder = folder_with_summary(tmp_path)
    log, console = io.StringIO(), io.StringIO()
    progress = Progress(folder, folder.read_summary(), console)
    stream = ConsoleFilter(log, io.StringIO(), verbose=False, progress=progress)
    for chunk in (RUNNER_OUTPUT[:50], RUNNER_OUTPUT[50:]):  # lines split across writes
        stream.write(chunk)
    assert log.getvalue() == _ANSI.sub("", RUNNER_OUTPUT) and "\x1b" not in log.getvalue()
    shown = [line[11:] for line in console.getvalue().splitlines()]  # without the "[HH:MM:SS] " prefix
    assert shown[0] == "prepare: running" and shown[1].startswith("prepare: reused (inputs unchanged) (")
    assert shown[2:] == ["train: running"]  # a failure is reported by the CLI, first
    assert progress.reused == ["prepare"] and progress.failed == "train"
    assert folder.read_summary().stage == "train"  # the running stage, for an interruption


STARTED = "00:24:04.300 - INFO - Executing task 'train-model'"
STEP_LINE = (
    "    [KFP Executor 2026-11-22 00:22:54,065 INFO]: step 300/1000 (30%), ETA 40s, loss 0.31, 8.0 steps/s "
    "(512 examples/s)"
)
DONE = "00:25:09.330 - INFO - Task 'train-model' finished with status SUCCESS"


def test_off_a_terminal_the_heartbeat_is_a_line_a_minute_with_the_stages_latest_progress_counted_down(tmp_path):
    folder = folder_with_summary(tmp_path)
    console, clock = io.StringIO(), Clock(100.0)
    progress = Progress(folder, folder.read_summary(), console, every=60.0, clock=clock)
    progress.line(STARTED)
    for seconds in range(1, 60):  # a stage shorter than a minute: no heartbeat
        clock.now = 100.0 + seconds
        progress.heartbeat()
    progress.line(STEP_LINE)
    for seconds in range(60, 130):
        clock.now = 100.0 + seconds
        progress.heartbeat()
    progress.line(DONE)
    clock.now += 600
    progress.heartbeat()  # nothing runs: nothing to say
    shown = [line[11:] for line in console.getvalue().splitlines()]
    assert shown == [
        "train: running",
        "train: still running (1m00s): step 300/1000 (30%), ETA 39s, loss 0.31, 8.0 steps/s (512 examples/s)",
        "train: still running (2m00s): step 300/1000 (30%), ETA 0s, loss 0.31, 8.0 steps/s (512 examples/s)",
        "train: done (129.0 s)",
    ]
    assert progress.seconds == {"train": 129.0}  # the run's summary records it (run.seconds)


def test_early_stopping_gets_a_console_line_of_its_own(tmp_path):
    folder = folder_with_summary(tmp_path)
    console = io.StringIO()
    progress = Progress(folder, folder.read_summary(), console)
    progress.line(STARTED)
    stop = "early stopping at step 700: no improvement of the validation loss for 5 rounds; the model is step 200's"
    progress.line(f"    [KFP Executor 2026-11-22 00:22:54,065 INFO]: {stop} checkpoint, validation loss 0.0313")
    progress.line(DONE)
    shown = [line[11:] for line in console.getvalue().splitlines()]
    assert shown[1] == f"train: {stop} checkpoint, validation loss 0.0313"
    assert shown[2].startswith("train: done (")


def test_on_a_terminal_the_heartbeat_is_redrawn_in_place_and_replaced_by_the_next_event(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    folder = folder_with_summary(tmp_path)
    console, clock = Terminal(), Clock(100.0)
    progress = Progress(folder, folder.read_summary(), console, clock=clock)
    progress.line(STARTED)
    for seconds in (1, 2):
        clock.now = 100.0 + seconds
        progress.heartbeat()
    progress.line(
        "    [KFP Executor 2026-11-22 00:22:54,065 INFO]: batch predict: 81/162 rows (50%), 900 rows/s, ETA 0s"
    )
    clock.now = 103.0
    progress.heartbeat()
    progress.line(DONE)
    text = console.getvalue()
    assert text.count("\n") == 2  # "running" and "done": the heartbeats share one line
    beats = [part[11:] for part in text.split("\r\x1b[K")[1:]]
    assert beats[:3] == [
        "train: still running (1s)",
        "train: still running (2s)",
        "train: still running (3s): batch predict: 81/162 rows (50%), 900 rows/s, ETA 0s",
    ]
    assert beats[3] == "train: done (3.0 s)\n"
    monkeypatch.setenv("COLUMNS", "40")  # never wider than the terminal: a wrapped line cannot be redrawn
    progress.line(STARTED)
    progress.line(STEP_LINE)
    progress.heartbeat()
    assert len(console.getvalue().rsplit("\r\x1b[K", 1)[1]) == 39


def test_verbose_console_shows_everything_without_colour_codes():
    console = io.StringIO()
    ConsoleFilter(io.StringIO(), console, verbose=True).write(RUNNER_OUTPUT)
    assert console.getvalue() == _ANSI.sub("", RUNNER_OUTPUT)


def test_the_failed_stages_error_is_its_exceptions_first_line(tmp_path):
    path = tmp_path / "pipeline.log"
    path.write_text("    Traceback (most recent call last):\n      old\n    ValueError: earlier\n" + RUNNER_OUTPUT)
    assert failure_message(str(path), "train") == ("DataError: data.csv line 7, column 'x': 'abc' is not a number")
    excerpt = failure_excerpt(str(path)).splitlines()
    assert excerpt[0] == "Traceback (most recent call last):" and excerpt[-1] == "(the column is numeric)"
    path.write_text("00:24:09.330 - ERROR - Task 'train-model' finished with status FAILURE\n")  # killed: no traceback
    assert failure_message(str(path), "train") == (
        "the train stage stopped without an error message (killed by the system, e.g. out of memory?)"
    )


def test_every_attempt_of_a_run_uses_the_same_artifact_directory():
    """KFP 2.13 names a local run's directory after the current time; an attempt of a resumed run must find the
    earlier attempt's task directories (and their stage records), so the runner fixes the name."""
    from kfp.local import executor_input_utils

    with fixed_run_directory("20260101T000000Z-abcdef"):
        name = executor_input_utils.get_local_pipeline_resource_name("tpu-estimator-pipeline")
    assert name == "tpu-estimator-pipeline-20260101T000000Z-abcdef"
    assert executor_input_utils.get_local_pipeline_resource_name("p") != "p-20260101T000000Z-abcdef"


def test_task_names_map_to_stages():
    tasks = ("prepare-data", "train-model", "batch-predict", "check-serving", "release-model")
    assert [stage_of(t) for t in tasks] == ["prepare", "train", "batch_predict", "serving_check", "release"]


ARGUMENTS = {"data": "embedded:penguins", "train_steps": 50, "publish_root": "/p"}


def test_a_failed_or_interrupted_run_is_resumed_by_the_same_command_only(tmp_path):
    output = str(tmp_path)
    first, summary = choose_run(output, ARGUMENTS, resume=None)
    assert summary.run.attempts == 1 and summary.status == "running"
    first.create()
    runs.publish_summary(first, dataclasses.replace(summary, status="interrupted", stage="train"))
    again, resumed = choose_run(output, ARGUMENTS, resume=None)
    assert again == first and resumed.run.attempts == 2 and resumed.run.id == first.run_id
    other, _ = choose_run(output, {**ARGUMENTS, "train_steps": 60}, resume=None)
    assert other != first  # other arguments: a new run
    with pytest.raises(local.ResumeError, match=r"other values of train_steps; give the same arguments"):
        choose_run(output, {**ARGUMENTS, "train_steps": 60}, resume=True)
    fresh, _ = choose_run(output, ARGUMENTS, resume=False)
    assert fresh != first
    runs.publish_summary(first, dataclasses.replace(summary, status="ok"))
    with pytest.raises(
        local.ResumeError, match=f"no failed or interrupted run to resume; the last run, {first.run_id}, ended ok"
    ):
        choose_run(output, ARGUMENTS, resume=True)
    assert choose_run(output, ARGUMENTS, resume=None)[0] != first  # a finished run is never resumed


def test_group_members_lists_a_process_group_from_proc():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert group_members(child.pid) == [child.pid]
    finally:
        child.kill()
        child.wait()
    assert group_members(child.pid) == []


def test_data_summary_surfaces_quarantined_rows_and_empty_columns(tmp_path):
    from kfp.dsl import Dataset

    manifest = {
        "counts": {"train": 3, "eval": 1, "test": 0},
        "rows": {"total": 6, "written": 4, "bad": 2, "quarantined": 2},
        "missing": {"train": {"a": 3, "b": 1}, "eval": {"a": 1, "b": 0}, "test": {"a": 0, "b": 0}},
        "notes": ["column 'a' has no value in the training split (mean 0, std 1 used)"],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    dataset = Dataset(uri=str(tmp_path), metadata={"manifest_uri": str(tmp_path / "manifest.json")})
    assert data_summary(dataset) == {
        "counts": {"train": 3, "eval": 1, "test": 0},
        "rows": 6,
        "quarantined": 2,
        "quarantine_uri": os.path.join(str(tmp_path), "quarantine.jsonl"),
        "columns_all_missing": {"train": ["a"], "eval": ["a"]},
        "notes": manifest["notes"],
        "unlabelled": 0,
    }


ORPHAN_MAKER = """
import os, sys, time
if os.fork() == 0:          # a stage ...
    if os.fork() == 0:      # ... and its worker
        time.sleep(60)
    os._exit(0)             # the stage is killed: its worker is reparented outside the group
time.sleep(60)              # the group's leader (the runner) lives on
"""


def test_workers_of_a_killed_stage_are_stopped_and_the_rest_of_the_group_is_kept():
    leader = subprocess.Popen([sys.executable, "-c", ORPHAN_MAKER], start_new_session=True)
    try:
        orphan = None
        deadline = time.monotonic() + 30
        while orphan is None and time.monotonic() < deadline:
            table = _process_table()
            outside = [p for p, (parent, group) in table.items() if group == leader.pid and p != leader.pid]
            outside = [p for p in outside if table.get(table[p][0], (0, 0))[1] != leader.pid]
            orphan = outside[0] if outside else None
            time.sleep(0.05)
        assert orphan is not None
        assert stop_orphans(leader.pid) == [orphan]
        deadline = time.monotonic() + 5
        while orphan in group_members(leader.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert group_members(leader.pid) == [leader.pid]
    finally:
        leader.kill()
        leader.wait()


STRICT_FAILURE = """00:24:04.300 - INFO - Executing task \x1b[96m'train-model'\x1b[0m
    Traceback (most recent call last):
      File "/tmp/tmp.x/ephemeral_component.py", line 40, in train_model
        result = estimator.train(job, prepared.schema, prepared.files("train"), model.uri)
    estimator_lib.strict.checks.TPUStrictError: TPU-strict mode found 2 problem(s) a TPU would fail on:
      [static-shape] 2:
        1. infer model_fn m.model_fn: op 'a' makes tensor 'a:0' of dynamic shape (None,) (name: static-shape:a)
        2. infer model_fn m.model_fn: op 'b' makes tensor 'b:0' of dynamic shape (None,) (name: static-shape:b)
      notes, 1:
        [dtype] 1:
          3. train input: the label is int64 (name: dtype:label)
      A finding that is wrong for this model can be accepted by its name
    (the exception's own text ends here)

00:24:09.330 - ERROR - Task \x1b[96m'train-model'\x1b[0m finished with status \x1b[91mFAILURE\x1b[0m
"""


def test_the_failed_stages_error_keeps_the_list_its_message_continues_with(tmp_path):
    path = tmp_path / "pipeline.log"
    path.write_text(STRICT_FAILURE)
    assert failure_message(str(path), "train").splitlines() == [
        "TPUStrictError: TPU-strict mode found 2 problem(s) a TPU would fail on:",
        "  [static-shape] 2:",
        "    1. infer model_fn m.model_fn: op 'a' makes tensor 'a:0' of dynamic shape (None,) (name: static-shape:a)",
        "    2. infer model_fn m.model_fn: op 'b' makes tensor 'b:0' of dynamic shape (None,) (name: static-shape:b)",
        "  notes, 1:",
        "    [dtype] 1:",
        "      3. train input: the label is int64 (name: dtype:label)",
        "  A finding that is wrong for this model can be accepted by its name",
    ]
    assert failure_message(str(path), "train", listed=2).splitlines() == [
        "TPUStrictError: TPU-strict mode found 2 problem(s) a TPU would fail on:",
        "  [static-shape] 2:",
        "    1. infer model_fn m.model_fn: op 'a' makes tensor 'a:0' of dynamic shape (None,) (name: static-shape:a)",
        f"  ... 5 more line(s) in {path}",
    ]
    numbered = "    ValueError: 2 problems:\n    1. first\n    2) second\n    not listed\n"
    path.write_text('    Traceback (most recent call last):\n      File "x.py", line 1, in f\n' + numbered)
    assert failure_message(str(path), "train") == "ValueError: 2 problems:\n1. first\n2) second"


def test_a_last_run_whose_summary_this_version_cannot_read_is_not_resumed_but_a_new_run_starts(tmp_path):
    output = str(tmp_path)
    first, summary = choose_run(output, ARGUMENTS, resume=None)
    first.create()
    runs.publish_summary(first, dataclasses.replace(summary, status="interrupted", stage="train"))
    with open(first.summary_path, encoding="utf-8") as f:
        written = json.load(f)
    with open(first.summary_path, "w", encoding="utf-8") as f:
        json.dump({**written, "written_by": "a later version"}, f)
    new, started = choose_run(output, ARGUMENTS, resume=None)
    assert new != first and started.run.attempts == 1
    with pytest.raises(local.ResumeError, match=r"--resume: the last run's summary cannot be read: .*written_by"):
        choose_run(output, ARGUMENTS, resume=True)
