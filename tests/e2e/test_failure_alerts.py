"""End to end: a local run that fails posts one failure alert to a webhook on 127.0.0.1, naming the failed stage
and its error's first line, and the command still reports the run's own failure (real KFP local runner; the
run fails in prepare, seconds in); a run whose scored rows are skewed succeeds and posts one warning alert."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from penguin_rows import penguin_rows, write_rows
from repo import ROOT
from webhook_server import webhook

pytestmark = pytest.mark.slow  # real local runs

ERROR = (
    "DataError: the eval split is empty: 2 good row(s) are too few for eval_fraction=0.2 and test_fraction=0.0; "
    "add rows or change the fractions"
)


def test_a_failed_local_run_posts_one_alert_with_the_failed_stage_and_its_error(tmp_path):
    data = tmp_path / "tiny.csv"
    data.write_text("x,y\n1,a\n2,b\n")
    output = str(tmp_path / "out")
    with webhook() as hook:
        command = [sys.executable, "-m", "pipelines", "run-local", "--output", output, "--data", str(data)]
        command += ["--label", "y", "--set", "prepare.num_workers=1", "--notify-webhook", hook.url]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600, check=False)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stderr.splitlines()[0] == f"tpu-pipeline run-local: error: prepare: {ERROR}"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    run = summary["run"]["id"]
    [post] = hook.posts
    assert post["path"] == "/hooks/T0/s3cr3t" and post["content_type"] == "application/json"
    assert post["body"] == {
        "text": f"tpu-estimator-pipeline run {run} failed at prepare: {ERROR}",
        "pipeline": "tpu-estimator-pipeline",
        "run": run,
        "state": "FAILED",
        "stage": "prepare",
        "error": ERROR,
        "where": "local",
        "link": summary["run"]["log"],
        "warning": "",
    }
    port = hook.url.split(":")[2].split("/")[0]
    assert f"failure alert to http://127.0.0.1:{port}/...: delivered\n" in done.stdout
    with open(summary["run"]["log"], encoding="utf-8") as log:
        assert "s3cr3t" not in done.stdout + done.stderr + json.dumps(summary) + log.read()


def test_a_local_run_whose_scored_rows_are_skewed_succeeds_and_posts_one_warning_alert(tmp_path):
    """The default skew check (`predict.skew=warn`) on rows where a third of the islands are new: the run ends
    ok, publishes, and the webhook gets one message saying so, with the check's line (summary.json has the same)."""
    rows = [{k: v for k, v in row.items() if k != "species"} for row in penguin_rows()]
    for i, row in enumerate(rows):
        row["island"] = "Atlantis" if i % 3 == 0 else row["island"]
    scored = write_rows(tmp_path / "scored.csv", rows)
    output = str(tmp_path / "out")
    with webhook() as hook:
        command = [sys.executable, "-m", "pipelines", "run-local", "--output", output, "--predict-data", scored]
        command += ["--set", "prepare.num_workers=1", "--set", "training.train_steps=20", "--baseline", "none"]
        command += ["--notify-webhook", hook.url]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    skew = summary["predictions"]["skew"]
    assert skew["status"] == "warned" and skew["worst"][0]["feature"] == "island"
    assert skew["warning"] == f"skew check {skew['summary']}"
    [post] = hook.posts
    run = summary["run"]["id"]
    assert post["body"] == {
        "text": f"tpu-estimator-pipeline run {run} succeeded with a warning at batch_predict: {skew['warning']}",
        "pipeline": "tpu-estimator-pipeline",
        "run": run,
        "state": "SUCCEEDED",
        "stage": "batch_predict",
        "error": "",
        "where": "local",
        "link": summary["run"]["log"],
        "warning": skew["warning"],
    }
    assert "`island`: 33% of its values are a category never seen in training" in skew["warning"]
    port = hook.url.split(":")[2].split("/")[0]
    assert f"warning alert to http://127.0.0.1:{port}/...: delivered\n" in done.stdout
