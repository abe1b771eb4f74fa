"""End to end: a local run that fails posts one failure alert to a webhook on 127.0.0.1, naming the failed stage
and its error's first line, and the command still reports the run's own failure (real KFP local runner; the
run fails in prepare, seconds in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from repo import ROOT
from webhook_server import webhook

pytestmark = pytest.mark.slow  # a real local run, though it fails seconds in

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
    }
    port = hook.url.split(":")[2].split("/")[0]
    assert f"failure alert to http://127.0.0.1:{port}/...: delivered\n" in done.stdout
    with open(summary["run"]["log"], encoding="utf-8") as log:
        assert "s3cr3t" not in done.stdout + done.stderr + json.dumps(summary) + log.read()
