"""The failure alert and the warning alert: their message, their POST to a webhook on 127.0.0.1 (up, down, failing,
silent), what a Vertex AI run's exit task says, and that no log names the webhook's URL."""

from __future__ import annotations

import base64
import logging

import pytest
from webhook_server import closed_port_url, silent_server, webhook

from estimator_lib.cloud import alerts
from estimator_lib.cloud import tasks as task_details
from estimator_lib.config import ConfigError
from estimator_lib.config.alerts import AlertConfig, redact_url

ALERT = alerts.Alert(
    pipeline="tpu-estimator-pipeline",
    run="20261125T000000Z-abcdef",
    state="FAILED",
    stage="train",
    error="ValueError: training.train_steps=0 must be a positive integer",
    where="local",
    link="/out/runs/20261125T000000Z-abcdef/pipeline.log",
)
JOB = "projects/my-project/locations/us-central1/pipelineJobs/tpu-estimator-pipeline-20261125000000"
STAGES = {"prepare-data": "prepare", "train-model": "train", "evaluate-model": "evaluate"}


def test_the_message_names_the_run_the_stage_and_the_errors_first_line():
    assert ALERT.payload() == {
        "text": "tpu-estimator-pipeline run 20261125T000000Z-abcdef failed at train: ValueError: "
        "training.train_steps=0 must be a positive integer",
        "pipeline": "tpu-estimator-pipeline",
        "run": "20261125T000000Z-abcdef",
        "state": "FAILED",
        "stage": "train",
        "error": "ValueError: training.train_steps=0 must be a positive integer",
        "where": "local",
        "link": "/out/runs/20261125T000000Z-abcdef/pipeline.log",
        "warning": "",
    }
    stopped = alerts.Alert("p", "r", "CANCELLED", "", "interrupted by SIGTERM", "local")
    assert stopped.payload()["text"] == "p run r was cancelled: interrupted by SIGTERM"


def test_a_warning_alert_says_the_run_succeeded_and_carries_the_warning_in_the_same_fields():
    warned = alerts.Alert("p", "r", "SUCCEEDED", "batch_predict", "", "local", "/log", "skew check warned: 1 of 7 ...")
    assert warned.payload() == {
        "text": "p run r succeeded with a warning at batch_predict: skew check warned: 1 of 7 ...",
        "pipeline": "p",
        "run": "r",
        "state": "SUCCEEDED",
        "stage": "batch_predict",
        "error": "",
        "where": "local",
        "link": "/log",
        "warning": "skew check warned: 1 of 7 ...",
    }
    assert set(warned.payload()) == set(ALERT.payload()) and ALERT.payload()["warning"] == ""
    assert (warned.kind, ALERT.kind) == ("warning alert", "failure alert")


def test_the_alert_is_one_json_post():
    with webhook(status=204) as hook:
        assert alerts.post(hook.url, ALERT) is None
    assert hook.posts == [{"path": "/hooks/T0/s3cr3t", "content_type": "application/json", "body": ALERT.payload()}]


def test_a_webhook_that_is_down_failing_or_silent_is_reported_never_raised_and_its_url_is_never_logged(caplog):
    caplog.set_level(logging.WARNING, logger=alerts.__name__)
    assert alerts.post(closed_port_url(), ALERT) == "cannot reach it: Connection refused"
    with webhook(status=500) as hook:
        assert alerts.post(hook.url, ALERT) == "the server answered HTTP 500 Internal Server Error"
    with silent_server() as url:
        assert alerts.post(url, ALERT, timeout=0.3) == "no answer within 0.3 s"
    assert len(caplog.records) == 3
    assert all(r.getMessage().startswith("failure alert to http://127.0.0.1:") for r in caplog.records)
    assert "s3cr3t" not in caplog.text


def test_redact_url_keeps_the_scheme_and_host_only():
    assert redact_url("https://hooks.slack.com/services/T0/B0/s3cr3t") == "https://hooks.slack.com/..."
    assert redact_url("https://chat.googleapis.com/v1/spaces/A/messages?key=k&token=t") == (
        "https://chat.googleapis.com/..."
    )
    assert redact_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert redact_url("http://host:port/x") == "(an unreadable URL)"
    assert redact_url("hooks.example.com/s3cr3t") == "(not a URL)"


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"emails": ("a@example.com",), "webhook": "https://hooks.example.com/x"},
            "--notify-email and --notify-webhook are both given; a KFP pipeline has one exit handler, with one "
            "task: choose one (a webhook can forward to email)",
        ),
        (
            {"emails": ("a@example.com", "b@example.com", "c@example.com", "d@example.com")},
            "--notify-email is given 4 times; Vertex AI's notification email takes at most 3 recipients: use a "
            "group address",
        ),
        ({"emails": ("ml team",)}, "--notify-email 'ml team' is not an email address, e.g. ml@example.com"),
        (
            {"webhook": "ftp://files.example.com/s3cr3t"},
            "--notify-webhook must be an http(s) URL with a host or secret:projects/P/secrets/NAME, got "
            "ftp://files.example.com/... (shown without its path); give e.g. https://hooks.example.com/services/...",
        ),
        (
            {"webhook": "secret:alerts-hook"},
            "--notify-webhook must be an http(s) URL with a host or secret:projects/P/secrets/NAME, got (not a URL) "
            "(shown without its path); give e.g. https://hooks.example.com/services/...",
        ),
        (
            {"webhook": "hooks.example.com/s3cr3t"},
            "--notify-webhook must be an http(s) URL with a host or secret:projects/P/secrets/NAME, got (not a URL) "
            "(shown without its path); give e.g. https://hooks.example.com/services/...",
        ),
    ],
)
def test_alert_settings_are_checked_and_the_error_never_shows_the_webhooks_path(settings, message):
    with pytest.raises(ConfigError) as raised:
        AlertConfig(**settings)
    assert str(raised.value) == message


def test_valid_alert_settings():
    assert not AlertConfig().wanted
    assert AlertConfig(emails=("ml@example.com", "oncall@example.org")).wanted
    config = AlertConfig(webhook="https://hooks.slack.com/services/T0/B0/s3cr3t")
    assert config.described() == {"emails": [], "webhook": "https://hooks.slack.com/..."}


def task(name: str, state: str, error: str = "", end: str = "") -> dict:
    return {"taskName": name, "state": state, "error": error, "endTime": end}


def test_a_vertex_runs_failed_stage_is_its_first_failed_stage_task():
    tasks = [
        task("tpu-estimator-pipeline-20261125000000", "FAILED", "The DAG failed because some tasks failed."),
        task("exit-handler-1", "FAILED", "The DAG failed because some tasks failed."),
        task("prepare-data", "SUCCEEDED", end="2026-11-25T00:02:00+00:00"),
        task("evaluate-model", "FAILED", "evaluate failed\nmore", "2026-11-25T00:09:00+00:00"),
        task(
            "train-model",
            "FAILED",
            "\nThe replica workerpool0-0 exited with a non-zero status of 1.\nlogs: ...",
            "2026-11-25T00:05:00+00:00",
        ),
    ]
    assert alerts.vertex_failure(tasks, STAGES, "The DAG failed") == (
        "train",
        "The replica workerpool0-0 exited with a non-zero status of 1.",
    )
    assert alerts.vertex_failure(tasks[:3], STAGES, "\nCancelled by the user.\n") == ("", "Cancelled by the user.")


def test_a_vertex_run_that_succeeded_sends_nothing_and_one_that_failed_sends_its_stage():
    def tasks_of(job: str) -> list:
        assert job == JOB
        return [task("train-model", "FAILED", "The replica workerpool0-0 exited with a non-zero status of 1.")]

    with webhook() as hook:
        succeeded = {"state": "SUCCEEDED", "pipeline_job_resource_name": JOB, "error_message": ""}
        assert alerts.alert_vertex_run(hook.url, "p", STAGES, succeeded, tasks_of) is None
        failed = {**succeeded, "state": "FAILED", "error_message": "The DAG failed because some tasks failed."}
        sent = alerts.alert_vertex_run(hook.url, "p", STAGES, failed, tasks_of)
    assert [post["body"] for post in hook.posts] == [sent.payload()]
    assert sent == alerts.Alert(
        "p",
        JOB,
        "FAILED",
        "train",
        "The replica workerpool0-0 exited with a non-zero status of 1.",
        "vertex",
        "https://console.cloud.google.com/vertex-ai/locations/us-central1/pipelines/runs/"
        "tpu-estimator-pipeline-20261125000000?project=my-project",
    )


def test_a_vertex_run_that_succeeded_with_a_stages_warning_sends_it():
    line = "skew check warned: 1 of 7 features skewed: `island`: 31% of its values are a category never seen"
    stages = {**STAGES, "batch-predict": "batch_predict"}
    tasks = [
        task("tpu-estimator-pipeline-20261125000000", "SUCCEEDED"),
        task("prepare-data", "SUCCEEDED", end="2026-11-25T00:02:00+00:00"),
        {**task("batch-predict", "SUCCEEDED", end="2026-11-25T00:09:00+00:00"), "warnings": [line]},
        {**task("exit-handler-1", "SUCCEEDED"), "warnings": ["not a stage: never read"]},
    ]
    succeeded = {"state": "SUCCEEDED", "pipeline_job_resource_name": JOB, "error_message": ""}
    with webhook() as hook:
        sent = alerts.alert_vertex_run(hook.url, "p", stages, succeeded, lambda job: tasks)
        assert alerts.alert_vertex_run(hook.url, "p", stages, succeeded, lambda job: tasks[:2]) is None
    assert (sent.state, sent.stage, sent.error, sent.warning) == ("SUCCEEDED", "batch_predict", "", line)
    assert [post["body"] for post in hook.posts] == [sent.payload()]
    assert sent.payload()["text"] == f"p run {JOB} succeeded with a warning at batch_predict: {line}"


def test_a_tasks_warnings_are_read_from_its_output_artifacts_metadata():
    from google.cloud.aiplatform_v1.types import Artifact, PipelineTaskDetail

    def artifact(**metadata) -> Artifact:
        return Artifact(uri="gs://b/a", metadata=metadata)

    outputs = {
        "predictions": PipelineTaskDetail.ArtifactList(artifacts=[artifact(count=40.0, warning="skew check warned")]),
        "other": PipelineTaskDetail.ArtifactList(artifacts=[artifact(warning=""), artifact()]),
    }
    predicted = PipelineTaskDetail(task_name="batch-predict", outputs=outputs)
    assert task_details._warnings(predicted) == ["skew check warned"]
    assert task_details._warnings(PipelineTaskDetail(task_name="train-model")) == []


def test_task_details_that_cannot_be_read_leave_the_stage_out_but_the_alert_goes(caplog):
    def unreadable(job: str) -> list:
        raise PermissionError("403 Permission 'aiplatform.pipelineJobs.get' denied")

    status = {"state": "FAILED", "pipeline_job_resource_name": JOB, "error_message": "The DAG failed."}
    with webhook() as hook:
        sent = alerts.alert_vertex_run(hook.url, "p", STAGES, status, unreadable)
    assert (sent.stage, sent.error) == ("", "The DAG failed.") and len(hook.posts) == 1
    assert f"cannot read the task details of {JOB} (403 Permission" in caplog.text


class SecretManager:
    """Stands in for Secret Manager's REST API (an `AuthorizedSession`): answers `access` with `text`, or 403."""

    def __init__(self, text: str = "", denied: bool = False):
        self.text, self.denied, self.requested = text, denied, []

    def get(self, url: str, timeout: float):
        self.requested.append((url, timeout))
        return self

    def raise_for_status(self) -> None:
        if self.denied:
            raise PermissionError("403 Client Error: Forbidden for url: https://secretmanager.googleapis.com/v1/...")

    def json(self) -> dict:
        return {"payload": {"data": base64.b64encode(self.text.encode("utf-8")).decode("ascii")}}


def test_a_webhook_kept_in_secret_manager_is_read_when_the_alert_is_sent(caplog):
    reference = "secret:projects/my-project/secrets/alerts-hook"
    assert AlertConfig(webhook=reference).described() == {"emails": [], "webhook": reference}
    with webhook() as hook:
        secrets = SecretManager(text=hook.url + "\n")
        assert alerts.deliver(reference, ALERT, lambda version: alerts.read_secret(version, secrets)) is None
        denied = SecretManager(denied=True)
        reason = alerts.deliver(reference + "/versions/3", ALERT, lambda version: alerts.read_secret(version, denied))
    assert [post["body"] for post in hook.posts] == [ALERT.payload()]
    assert secrets.requested == [
        ("https://secretmanager.googleapis.com/v1/projects/my-project/secrets/alerts-hook/versions/latest:access", 10.0)
    ]
    assert denied.requested[0][0].endswith("/secrets/alerts-hook/versions/3:access")
    assert reason == (
        "cannot read its URL from secret:projects/my-project/secrets/alerts-hook/versions/3: 403 Client Error: "
        "Forbidden for url: https://secretmanager.googleapis.com/v1/..."
    )
    assert "s3cr3t" not in caplog.text
