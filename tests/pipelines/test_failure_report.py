"""A run that did not end ok gets a short report.html in its folder (`failures.failure_report`, written by the
supervisor), OUTPUT/latest names it, and `show` and `list` read it."""

from __future__ import annotations

import csv
import dataclasses
import os
import subprocess
import sys

import pytest

from pipelines import listing, runs, show
from pipelines.local.failures import failure_report, next_step
from pipelines.local.supervisor import _finish
from pipelines.run_summary import RunInfo, RunSummary

ERROR = "DataError: data.csv line 6, column 'bmi': 'n/a' is not a number\n  1. fix the row"


def failed(folder: runs.RunFolder, stage: str = "prepare", status: str = runs.FAILED) -> RunSummary:
    run = RunInfo(folder.run_id, folder.path, folder.log, "2026-11-28T23:00:00+00:00", 1, seconds={})
    run = dataclasses.replace(run, seconds={"resolve": 5.6, "prepare": 0.3}, reused=["resolve"])
    return RunSummary(status=status, stage=stage, error=ERROR, run=run, config={})


def test_the_failure_report_names_the_stage_its_error_what_to_do_the_finished_stages_and_the_records(tmp_path):
    folder = runs.RunFolder(str(tmp_path), "r1")
    page = failure_report(failed(folder))
    assert "<title>run r1: failed at prepare</title>" in page
    assert "the prepare stage stopped after 0.3 s; nothing was published, and no model was evaluated" in page
    error = "DataError: data.csv line 6, column &#x27;bmi&#x27;: &#x27;n/a&#x27; is not a number\n  1. fix the row"
    assert f"<pre>{error}</pre>" in page
    assert "<p>Fix what the error names, then run the same command again: it resumes the run" in page
    assert '<tr><td>resolve</td><td class="n">5.6 s</td></tr></table>' in page  # the failed stage is not listed
    assert "Reused from an earlier attempt: resolve." in page
    assert '<a href="pipeline.log">pipeline.log</a>' in page and '<a href="summary.json">summary.json</a>' in page
    evaluated = failure_report(failed(folder, "release"), "pipeline-root/p-r1/evaluate-model/report")
    assert 'the model was evaluated: <a href="pipeline-root/p-r1/evaluate-model/report">its report</a>' in evaluated


@pytest.mark.parametrize(
    "status, stage, step",
    [
        (runs.FAILED, "resolve", "change what the error names, then run the command again"),
        (runs.FAILED, "train", "fix what the error names, then run the same command again: it resumes the run"),
        (runs.INTERRUPTED, "train", "run the same command again to resume it"),
    ],
)
def test_the_next_step_follows_how_and_where_the_run_ended(tmp_path, status, stage, step):
    assert next_step(failed(runs.RunFolder(str(tmp_path), "r1"), stage, status)).startswith(step)


def test_a_failed_runs_folder_gets_its_report_latest_names_it_and_show_and_list_read_it(tmp_path):
    folder = runs.RunFolder.new(str(tmp_path))
    folder.create()
    summary = failed(folder)
    runs.publish_summary(folder, dataclasses.replace(summary, status=runs.RUNNING))
    outcome = _finish(folder, 1, None, {"summary": summary.to_dict()})
    assert outcome.summary.report == folder.report and os.path.isfile(folder.report)
    assert os.path.realpath(os.path.join(str(tmp_path), runs.LATEST_LINK)) == folder.path
    recorded = RunSummary.read(runs.find_summary(str(tmp_path), None))
    assert f"  report: {folder.report}" in show.format_run(recorded, folder.summary_path).splitlines()
    [line] = listing.list_runs(str(tmp_path))
    assert line.verdict == "failed at prepare: DataError: data.csv line 6, column 'bmi': 'n/a' is not a number"


def test_an_interrupted_run_gets_its_report_too(tmp_path):
    folder = runs.RunFolder.new(str(tmp_path))
    folder.create()
    runs.publish_summary(folder, dataclasses.replace(failed(folder), status=runs.RUNNING, stage="train"))
    outcome = _finish(folder, -15, 15, {})
    assert outcome.summary.status == runs.INTERRUPTED and outcome.summary.report == folder.report
    with open(folder.report, encoding="utf-8") as f:
        assert "interrupted at train" in f.read()


@pytest.mark.slow
def test_run_local_on_a_bad_value_ends_failed_with_a_report_and_latest_on_it(tmp_path):
    data = tmp_path / "bad.csv"
    with open(data, "w", newline="") as f:
        rows = [["x", "y"], *([str(i), str(2 * i)] for i in range(30))]
        rows[5][0] = "not-a-number"
        csv.writer(f).writerows(rows)
    output = str(tmp_path / "out")
    command = [sys.executable, "-m", "pipelines", "run-local", "--data", str(data), "--label", "y"]
    proc = subprocess.run([*command, "--output", output], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1, proc.stderr
    latest = runs.last_run(output)
    summary = latest.read_summary()
    assert (summary.status, summary.stage, summary.report) == (runs.FAILED, "prepare", latest.report)
    with open(latest.report, encoding="utf-8") as f:
        assert "column &#x27;x&#x27;: &#x27;not-a-number&#x27; is not a number" in f.read()


def test_after_a_nan_loss_the_next_step_says_what_to_change_not_to_rerun(tmp_path):
    error = "NanLossDuringTrainingError: NaN loss during training."
    summary = dataclasses.replace(failed(runs.RunFolder(str(tmp_path), "r1"), "train"), error=error)
    assert next_step(summary) == (
        "training's loss became NaN: lower the learning rate (--set training.optimizer.learning_rate=..., or your "
        "model_fn's through --hparams), clip the gradients (--set training.optimizer.clip_gradient_norm=1.0), or "
        "remove the inf or NaN values from the data, then run the command again (with a changed setting or "
        "data, training starts afresh)"
    )
