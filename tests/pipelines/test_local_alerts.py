"""A local run's failure alert, sent by the supervisor (the KFP local runner runs no exit handler): what it says
for a failed, an interrupted and a finished run, the warning alert of a run whose skew check warned, and a webhook
that is down leaves the run's outcome as it was. The real runs that post to a server on 127.0.0.1 are in
tests/e2e/test_failure_alerts.py."""

from __future__ import annotations

import copy
import json
import os

from webhook_server import closed_port_url, webhook

from estimator_lib.cloud.alerts import Alert
from pipelines import local, runs
from pipelines.local.supervisor import alert_webhook, run_alert
from pipelines.run_summary import RunInfo, RunSummary

FOLDER = runs.RunFolder("/out", "20261125T000000Z-abcdef")
LOG = "/out/runs/20261125T000000Z-abcdef/pipeline.log"


def outcome(status: str, stage, error) -> local.Outcome:
    run = RunInfo(FOLDER.run_id, FOLDER.path, LOG, "2026-11-25T00:00:00+00:00", attempts=1)
    summary = RunSummary(status=status, stage=stage, error=error, run=run, config={})
    return local.Outcome(FOLDER, summary, local.EXIT_OK if status == runs.OK else local.EXIT_FAILED)


def test_a_failed_run_alerts_with_its_stage_and_its_errors_first_line():
    crashed = outcome(runs.FAILED, "train", "the stage's process was killed by SIGABRT (Aborted): ...\n    last line")
    assert run_alert(crashed) == Alert(
        "tpu-estimator-pipeline",
        FOLDER.run_id,
        "FAILED",
        "train",
        "the stage's process was killed by SIGABRT (Aborted): ...",
        "local",
        LOG,
    )
    stopped = run_alert(outcome(runs.INTERRUPTED, None, "interrupted by SIGTERM"))
    assert (stopped.state, stopped.stage, stopped.error) == ("CANCELLED", "", "interrupted by SIGTERM")
    assert run_alert(outcome(runs.OK, None, None)) is None


def finished(skew: dict | None) -> local.Outcome:
    """A finished run's outcome: a real run's summary.json, its predictions' skew check as given."""
    with open(os.path.join(os.path.dirname(__file__), "recorded_summary.json"), encoding="utf-8") as f:
        recorded = json.load(f)
    recorded["predictions"] = {**recorded["predictions"], "skew": skew}
    run = {"id": FOLDER.run_id, "dir": FOLDER.path, "log": LOG, "started": "2026-11-25T00:00:00+00:00", "attempts": 1}
    return local.Outcome(FOLDER, RunSummary.from_dict({**recorded, "run": run}), local.EXIT_OK)


WARNED = {
    "status": "warned",
    "mode": "warn",
    "summary": "warned: 1 of 7 features skewed: `island`: 33% of its values are a category never seen in training",
    "worst": [],
    "uri": "/out/b/predictions/skew.json",
    "warning": "skew check warned: 1 of 7 features skewed: `island`: 33% of its values are a category never seen "
    "in training",
}


def test_a_finished_run_whose_skew_check_warned_posts_one_warning_alert(capsys):
    with webhook() as hook:
        assert alert_webhook(hook.url, finished(WARNED)) is None
        passed = {**WARNED, "status": "passed", "summary": "passed: 7 features ...", "warning": ""}
        assert alert_webhook(hook.url, finished(passed)) is None
        assert alert_webhook(hook.url, finished(None)) is None  # `predict.skew=off`
    assert [post["body"] for post in hook.posts] == [run_alert(finished(WARNED)).payload()]
    assert hook.posts[0]["body"]["text"] == (
        f"tpu-estimator-pipeline run {FOLDER.run_id} succeeded with a warning at batch_predict: {WARNED['warning']}"
    )
    assert (hook.posts[0]["body"]["state"], hook.posts[0]["body"]["link"]) == ("SUCCEEDED", LOG)
    port = hook.url.split(":")[2].split("/")[0]
    assert capsys.readouterr().out == f"warning alert to http://127.0.0.1:{port}/...: delivered\n"


def test_a_finished_run_posts_nothing():
    with webhook() as hook:
        assert alert_webhook(hook.url, outcome(runs.OK, None, None)) is None
    assert hook.posts == []


def test_a_webhook_that_is_down_leaves_the_runs_own_failure_as_it_was(capsys):
    failed = outcome(runs.FAILED, "prepare", "DataError: the eval split is empty")
    before = copy.deepcopy(failed)
    url = closed_port_url()
    assert alert_webhook(url, failed) == "cannot reach it: Connection refused"
    assert failed == before  # the summary, its stage and error, and the exit code are the run's own
    port = url.split(":")[2].split("/")[0]
    assert capsys.readouterr().out == (
        f"failure alert to http://127.0.0.1:{port}/...: not delivered (cannot reach it: Connection refused)\n"
    )
