"""A local run's failure alert, sent by the supervisor (the KFP local runner runs no exit handler): what it says
for a failed, an interrupted and a finished run, and a webhook that is down leaves the run's outcome as it was.
The real run that posts to a server on 127.0.0.1 is in tests/e2e/test_failure_alerts.py."""

from __future__ import annotations

import copy

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
