"""Failure alerts on Vertex AI: the exit handler around the whole DAG in the compiled YAML (Vertex AI's email
component, or our webhook task), the flags' refusals, what --dry-run shows (never the webhook's path), and the
webhook task's body reading a failed run's task details through the SDK (the API is tests/vertex_api.py's fake)."""

from __future__ import annotations

import datetime
import json

import google.auth
import pytest
from compiled import STAGE_TASKS, compiled_spec
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform.compat.services import pipeline_service_client_v1
from google.cloud.aiplatform.compat.types import pipeline_job_v1
from kfp.dsl.executor import Executor
from vertex_api import FakeVertexAPI
from webhook_server import webhook

from components.notify import notify_webhook
from pipelines import cli

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "cd" * 32
ROOT = "gs://bucket/pipeline-root"
VERTEX = ["--project", "my-project", "--region", "us-central1", "--pipeline-root", ROOT, "--image", IMAGE]
HOOK = "https://hooks.example.com/services/T0/s3cr3t"
JOB = "projects/my-project/locations/us-central1/pipelineJobs/tpu-estimator-pipeline-20261125"


def compile_spec(tmp_path, *flags: str) -> dict:
    return compiled_spec(str(tmp_path / "pipeline.yaml"), "--image", IMAGE, "--cpu", *flags)


def exit_task(spec: dict, name: str) -> dict:
    """The root's exit task `name`, after checking that the exit handler holds the whole DAG."""
    root = spec["root"]["dag"]["tasks"]
    assert set(root) == {"exit-handler-1", name}
    assert set(spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]) == {*STAGE_TASKS, "record-run-cost"}
    assert "outputDefinitions" not in spec["root"]  # KFP takes no pipeline outputs from inside an exit handler
    task = root[name]
    assert task["dependentTasks"] == ["exit-handler-1"]
    assert task["triggerPolicy"] == {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}  # runs however the DAG ended
    assert task["cachingOptions"] == {}  # never reused from an earlier run
    return task


def test_the_webhook_task_is_the_exit_handler_of_the_whole_dag(tmp_path):
    spec = compile_spec(tmp_path, "--notify-webhook", HOOK)
    parameters = exit_task(spec, "notify-webhook")["inputs"]["parameters"]
    assert parameters == {
        "status": {"taskFinalStatus": {"producerTask": "exit-handler-1"}},
        "webhook": {"runtimeValue": {"constant": HOOK}},
        "pipeline": {"runtimeValue": {"constant": "tpu-estimator-pipeline"}},
        "stages": {"runtimeValue": {"constant": STAGE_TASKS}},
    }
    executor = spec["deploymentSpec"]["executors"]["exec-notify-webhook"]["container"]
    assert executor["image"] == IMAGE  # a lightweight component on the project image, like every stage


def test_the_email_component_is_the_exit_handler_of_the_whole_dag(tmp_path):
    spec = compile_spec(tmp_path, "--notify-email", "ml@example.com", "--notify-email", "oncall@example.org")
    parameters = exit_task(spec, "vertex-pipelines-notification-email")["inputs"]["parameters"]
    assert parameters == {
        "pipeline_task_final_status": {"taskFinalStatus": {"producerTask": "exit-handler-1"}},
        "recipients": {"runtimeValue": {"constant": ["ml@example.com", "oncall@example.org"]}},
    }


def test_dry_run_shows_the_alert_without_the_webhooks_path(capsys):
    argv = ["submit", *VERTEX, "--cpu", "--notify-webhook", HOOK, "--dry-run"]
    assert cli.main(argv, credentials=AnonymousCredentials()) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["compiled"]["alerts"] == {"emails": [], "webhook": "https://hooks.example.com/..."}
    assert "s3cr3t" not in out


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--notify-email", "ml@example.com", "--notify-webhook", HOOK],
            "--notify-email and --notify-webhook are both given; a KFP pipeline has one exit handler",
        ),
        (
            ["--template", "p.yaml", "--notify-webhook", HOOK],
            "--notify-webhook is applied when the pipeline is compiled, and --template p.yaml is compiled already",
        ),
        (["--notify-email", "ml team"], "--notify-email 'ml team' is not an email address, e.g. ml@example.com"),
    ],
)
def test_refusals_name_the_fix(monkeypatch, capsys, flags, message):
    api = FakeVertexAPI(monkeypatch)
    assert cli.main(["submit", *VERTEX, "--cpu", *flags], credentials=AnonymousCredentials()) == 2
    err = capsys.readouterr().err
    assert message in err and "s3cr3t" not in err
    assert api.pipeline_jobs == []


def failed_job(monkeypatch) -> None:
    """The fake API's PipelineJob, failed at train (Vertex AI's task error wording)."""
    at = datetime.datetime(2026, 11, 25, 3, 10, tzinfo=datetime.timezone.utc)
    served_job(
        monkeypatch,
        [
            pipeline_job_v1.PipelineTaskDetail(task_name="exit-handler-1", state="FAILED", end_time=at),
            pipeline_job_v1.PipelineTaskDetail(task_name="prepare-data", state="SUCCEEDED", end_time=at),
            pipeline_job_v1.PipelineTaskDetail(
                task_name="train-model",
                state="FAILED",
                end_time=at,
                error={"message": "The replica workerpool0-0 exited with a non-zero status of 1.\nlogs: https://..."},
            ),
        ],
    )


def served_job(monkeypatch, tasks: list) -> None:
    """The fake API (Vertex AI's API cannot run here) serves a PipelineJob with these task details."""
    FakeVertexAPI(monkeypatch)
    monkeypatch.setattr(google.auth, "default", lambda *a, **k: (AnonymousCredentials(), "my-project"))

    def get_pipeline_job(self, name, **_):
        return pipeline_job_v1.PipelineJob(name=name, state="PIPELINE_STATE_FAILED", job_detail={"task_details": tasks})

    monkeypatch.setattr(pipeline_service_client_v1.PipelineServiceClient, "get_pipeline_job", get_pipeline_job)


def run_exit_task(tmp_path, url: str, state: str, error: dict) -> None:
    """Runs the webhook task's function as Vertex AI would, through KFP's executor, given the final status."""
    status = {"state": state, "pipelineJobResourceName": JOB, "pipelineTaskName": "exit-handler-1", "error": error}
    parameters = {"webhook": url, "pipeline": "tpu-estimator-pipeline", "stages": STAGE_TASKS, "status": status}
    executor_input = {
        "inputs": {"parameterValues": parameters},
        "outputs": {"outputFile": str(tmp_path / "executor_output.json")},
    }
    Executor(executor_input=executor_input, function_to_execute=notify_webhook).execute()


def test_the_webhook_task_posts_the_failed_stage_it_reads_from_the_run(monkeypatch, tmp_path):
    failed_job(monkeypatch)
    with webhook() as hook:
        run_exit_task(tmp_path, hook.url, "FAILED", {"code": 9, "message": "The DAG failed because some tasks failed."})
        run_exit_task(tmp_path, hook.url, "SUCCEEDED", {})
    [post] = hook.posts
    assert post["body"] == {
        "text": f"tpu-estimator-pipeline run {JOB} failed at train: The replica workerpool0-0 exited with a "
        "non-zero status of 1.",
        "pipeline": "tpu-estimator-pipeline",
        "run": JOB,
        "state": "FAILED",
        "stage": "train",
        "error": "The replica workerpool0-0 exited with a non-zero status of 1.",
        "where": "vertex",
        "link": "https://console.cloud.google.com/vertex-ai/locations/us-central1/pipelines/runs/"
        "tpu-estimator-pipeline-20261125?project=my-project",
        "warning": "",
    }


def test_the_webhook_task_posts_the_skew_warning_of_a_run_that_succeeded(monkeypatch, tmp_path):
    """The warning is read from the batch-predict task's predictions artifact (`components.artifacts.describe_skew`
    puts it in the metadata), through the SDK's own task details."""
    line = "skew check warned: 1 of 7 features skewed: `island`: 33% of its values are a category never seen"
    at = datetime.datetime(2026, 11, 25, 3, 10, tzinfo=datetime.timezone.utc)
    artifacts = [{"uri": "gs://b/predictions", "metadata": {"count": 344.0, "warning": line}}]
    served_job(
        monkeypatch,
        [
            pipeline_job_v1.PipelineTaskDetail(task_name="train-model", state="SUCCEEDED", end_time=at),
            pipeline_job_v1.PipelineTaskDetail(
                task_name="batch-predict",
                state="SUCCEEDED",
                end_time=at,
                outputs={"predictions": {"artifacts": artifacts}},
            ),
        ],
    )
    with webhook() as hook:
        run_exit_task(tmp_path, hook.url, "SUCCEEDED", {})
    [post] = hook.posts
    assert post["body"]["text"] == f"tpu-estimator-pipeline run {JOB} succeeded with a warning at batch_predict: {line}"
    assert (post["body"]["state"], post["body"]["stage"], post["body"]["warning"]) == (
        "SUCCEEDED",
        "batch_predict",
        line,
    )
