"""The retry policy: every task of the compiled pipeline carries it (the YAML read back), TPU tasks on Spot VMs
say SPOT, the flags are checked, and the KFP local runner retries a failing task as the policy says.

(No `from __future__ import annotations`: KFP reads the component's annotations as types.)"""

import pytest
from compiled import compiled_spec
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1
from kfp import dsl
from kfp import local as kfp_local
from vertex_api import FakeVertexAPI, custom_job_request

from pipelines import cli
from pipelines.retry import NO_RETRIES, RetryPolicy, honour_retry_policies, vertex_policy

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "ef" * 32
STAGE_TASKS = {
    "resolve-inputs",
    "prepare-data",
    "train-model",
    "evaluate-model",
    "batch-predict",
    "export-model",
    "check-serving",
    "release-model",
}
TPU_TASKS = ("train-model", "evaluate-model", "batch-predict")
DEFAULT_POLICY = {"maxRetryCount": 2, "backoffDuration": "60s", "backoffFactor": 2.0, "backoffMaxDuration": "3600s"}
SPOT = aiplatform_v1.Scheduling.Strategy.SPOT
VERTEX = ["--project", "my-project", "--pipeline-root", "gs://bucket/runs", "--image", IMAGE]


@pytest.fixture(scope="module")
def spot_spec(tmp_path_factory):
    """Compiled for Spot TPUs with both Vertex AI steps and the default retry policy."""
    output = str(tmp_path_factory.mktemp("spot") / "pipeline.yaml")
    tracking = ["--experiment", "churn-weekly", "--model-registry", "churn"]
    return compiled_spec(output, "--image", IMAGE, "--tpu", "v3-8", "--spot", *tracking)


def test_every_task_has_the_default_retry_policy_and_the_tpu_tasks_run_on_spot(spot_spec):
    tasks = spot_spec["root"]["dag"]["tasks"]
    assert set(tasks) == STAGE_TASKS | {"join-experiment", "register-model", "record-run-cost"}
    for name, task in tasks.items():
        assert task["retryPolicy"] == DEFAULT_POLICY, name
        assert RetryPolicy.from_spec(task["retryPolicy"]) == vertex_policy(None, None) == RetryPolicy(2, 60)
    for name in TPU_TASKS:
        assert (
            custom_job_request(spot_spec, name).job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.SPOT
        )


def test_retries_and_backoff_are_set_on_cpu_pipelines_too_and_zero_sets_none(tmp_path):
    spec = compiled_spec(str(tmp_path / "p.yaml"), "--image", IMAGE, "--cpu", "--retries", "3", "--retry-backoff", "5")
    policies = {name: task["retryPolicy"] for name, task in spec["root"]["dag"]["tasks"].items()}
    assert set(policies) == STAGE_TASKS | {"record-run-cost"}
    expected = {**DEFAULT_POLICY, "maxRetryCount": 3, "backoffDuration": "5s"}
    assert [name for name, policy in policies.items() if policy != expected] == []
    none = compiled_spec(str(tmp_path / "none.yaml"), "--image", IMAGE, "--cpu", "--retries", "0")
    assert not [name for name, task in none["root"]["dag"]["tasks"].items() if "retryPolicy" in task]


def test_waits_grow_by_the_factor_up_to_the_cap():
    assert [RetryPolicy(4, 60).wait(n) for n in (1, 2, 3, 4)] == [60.0, 120.0, 240.0, 480.0]
    assert [RetryPolicy(3, 1000, max_backoff_seconds=1500).wait(n) for n in (1, 2, 3)] == [1000.0, 1500.0, 1500.0]
    assert RetryPolicy(2, 0).wait(2) == 0.0


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--retries", "11"], "--retries 11 must be a whole number from 0 to 10: the times a failed task runs again"),
        (["--retries", "-1"], "--retries -1 must be a whole number from 0 to 10"),
        (["--retry-backoff", "3601"], "--retry-backoff 3601 must be whole seconds from 0 to 3600"),
        (["--retry-backoff", "-5"], "--retry-backoff -5 must be whole seconds from 0 to 3600"),
    ],
)
def test_compile_refuses_a_policy_naming_the_flag(tmp_path, capsys, flags, message):
    assert cli.main(["compile", "--output", str(tmp_path / "p.yaml"), "--image", IMAGE, *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "p.yaml").exists()


def test_a_compiled_template_takes_no_retry_flags(monkeypatch, capsys):
    api = FakeVertexAPI(monkeypatch)
    argv = ["submit", *VERTEX, "--template", "p.yaml", "--retries", "0"]
    assert cli.main(argv, credentials=AnonymousCredentials()) == 2
    assert "--retries is applied when the pipeline is compiled, and --template p.yaml" in capsys.readouterr().err
    assert api.pipeline_jobs == []


def test_policy_fields_are_checked_when_built():
    with pytest.raises(ValueError, match=r"retry backoff_factor 0.5 must be at least 1 \(1: equal waits\)"):
        RetryPolicy(1, backoff_factor=0.5)
    with pytest.raises(ValueError, match="retry max_backoff_seconds 7200 must be from 0 to 3600"):
        RetryPolicy(1, max_backoff_seconds=7200)
    assert NO_RETRIES.apply("a task") == "a task"  # nothing set: the spec has no retryPolicy


@dsl.component(base_image="python:3.11")
def flaky(counter: str, failures: int) -> int:
    import os

    attempt = len(os.listdir(counter)) + 1
    open(os.path.join(counter, str(attempt)), "w").close()
    if attempt <= failures:
        raise RuntimeError(f"attempt {attempt} fails")
    return attempt


def flaky_pipeline(policy: RetryPolicy):
    @dsl.pipeline(name="flaky")
    def pipeline(counter: str, failures: int) -> int:
        return policy.apply(flaky(counter=counter, failures=failures)).output

    return pipeline


def test_the_local_runner_retries_a_failed_task_as_its_compiled_policy_says(tmp_path):
    kfp_local.init(runner=kfp_local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    waits = []
    pipeline = flaky_pipeline(RetryPolicy(retries=2, backoff_seconds=7))
    (tmp_path / "a").mkdir()
    with honour_retry_policies(pipeline, sleep=waits.append):
        assert pipeline(counter=str(tmp_path / "a"), failures=2).output == 3
    assert waits == [7.0, 14.0]
    (tmp_path / "b").mkdir()
    with honour_retry_policies(pipeline, sleep=waits.append), pytest.raises(RuntimeError, match="FAILURE"):
        pipeline(counter=str(tmp_path / "b"), failures=3)  # the retries are spent
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["1", "2", "3"]
    (tmp_path / "c").mkdir()
    with pytest.raises(RuntimeError, match="FAILURE"):  # outside the context: KFP's runner alone, no retry
        pipeline(counter=str(tmp_path / "c"), failures=1)
    assert [p.name for p in (tmp_path / "c").iterdir()] == ["1"]
