"""Vertex AI requests built by `submit` and `schedule`.

Vertex AI cannot be reached here. The requests are real google-cloud-aiplatform objects (`PipelineJob`,
`PipelineJobSchedule`) built with anonymous credentials and an explicit project and region; the only fake is
the Vertex AI API itself: `FakeVertexAPI` (tests/vertex_api.py) replaces the service clients' calls (and the
SDK's artifact-bucket check) and records what would have been sent. The TPU custom jobs' requests are in
test_vertex_capacity.py, the Experiment and Model Registry steps in test_vertex_steps.py.
"""

from __future__ import annotations

import json

import pytest
from google.auth.credentials import AnonymousCredentials
from vertex_api import FakeVertexAPI

from estimator_lib.config import RunConfig
from estimator_lib.config.stages import PrepareSpec, TrainSpec
from pipelines import cli, vertex
from pipelines.pipeline import compile_pipeline
from pipelines.tpu import preset

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "cd" * 32
ROOT = "gs://bucket/pipeline-root"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return compile_pipeline(str(tmp_path_factory.mktemp("t") / "p.yaml"), IMAGE, preset("v3-8"))


def target(**kwargs) -> vertex.VertexTarget:
    values = dict(
        project="my-project",
        location="us-central1",
        pipeline_root=ROOT,
        service_account="sa@p.iam.gserviceaccount.com",
        labels={"team": "ml", "env": "prod"},
    )
    values.update(kwargs)
    return vertex.VertexTarget(**values)


def settings() -> RunConfig:
    return RunConfig(
        publish_root=f"{ROOT}/published",
        data="gs://bucket/data/*.csv",
        label="churned",
        baseline="latest",
        warm_start="latest",
    )


def test_build_job_request(template):
    job = vertex.build_job(
        template, target(), settings().arguments(), credentials=AnonymousCredentials(), job_id="run-1"
    )
    resource = job._gca_resource
    assert resource.display_name == "tpu-estimator-pipeline"
    assert dict(resource.labels) == {"team": "ml", "env": "prod"}
    assert resource.runtime_config.gcs_output_directory == ROOT
    values = {k: v for k, v in resource.runtime_config.parameter_values.items()}
    prepare, trained = (
        PrepareSpec.from_json(values["prepare_spec"]).prepare,
        TrainSpec.from_json(values["train_spec"]).job,
    )
    assert prepare.data == ("gs://bucket/data/*.csv",) and prepare.label == "churned"
    assert values["publish_root"] == f"{ROOT}/published"
    assert values["baseline"] == "latest" and values["warm_start"] == "latest"
    assert trained.training.train_steps is None and trained.training.max_epochs is None  # from the data
    assert trained.model.family == "dnn"
    spec = dict(resource.pipeline_spec)
    assert spec["pipelineInfo"]["name"] == "tpu-estimator-pipeline"
    tasks = spec["root"]["dag"]["tasks"]
    cached = {name for name, task in tasks.items() if task["cachingOptions"].get("enableCache")}
    assert cached == {"prepare-data", "train-model", "batch-predict", "export-model", "check-serving"}  # compiled
    pools = spec["components"]["comp-train-model"]["inputDefinitions"]["parameters"]["worker_pool_specs"]
    assert pools["defaultValue"][0]["machine_spec"]["accelerator_type"] == "TPU_V3"
    assert job.project == "my-project" and job.location == "us-central1"


def test_no_caching_turns_it_off_for_every_task_and_caching_everything_is_refused(template):
    job = vertex.build_job(
        template, target(enable_caching=False), settings().arguments(), credentials=AnonymousCredentials()
    )
    tasks = dict(job._gca_resource.pipeline_spec)["root"]["dag"]["tasks"]
    assert all(task["cachingOptions"].get("enableCache", False) is False for task in tasks.values())
    with pytest.raises(ValueError, match=r"caching every task would reuse .* turn it off with --no-caching"):
        target(enable_caching=True)


def test_submit_sends_the_job_with_its_service_account(template, monkeypatch):
    api = FakeVertexAPI(monkeypatch)
    job = vertex.build_job(
        template,
        target(network="projects/1/global/networks/vpc"),
        settings().arguments(),
        credentials=AnonymousCredentials(),
        job_id="run-1",
    )
    vertex.submit(job, target(network="projects/1/global/networks/vpc"))
    [request] = api.pipeline_jobs
    assert request["parent"] == "projects/my-project/locations/us-central1"
    assert request["id"] == "run-1"
    sent = request["pipeline_job"]
    assert sent.service_account == "sa@p.iam.gserviceaccount.com"
    assert sent.network == "projects/1/global/networks/vpc"
    assert dict(sent.labels) == {"team": "ml", "env": "prod"}
    assert PrepareSpec.from_json(sent.runtime_config.parameter_values["prepare_spec"]).prepare.label == "churned"
    assert job.resource_name == "projects/my-project/locations/us-central1/pipelineJobs/run-1"
    assert api.buckets == [ROOT]


def test_schedule_sends_a_cron_schedule_of_the_job(template, monkeypatch):
    api = FakeVertexAPI(monkeypatch)
    job = vertex.build_job(template, target(), settings().arguments(), credentials=AnonymousCredentials())
    created = vertex.schedule(job, target(), "TZ=Europe/Paris 0 3 * * 1", "weekly-retrain", max_runs=52)
    [request] = api.schedules
    schedule = request["schedule"]
    assert request["parent"] == "projects/my-project/locations/us-central1"
    assert schedule.display_name == "weekly-retrain"
    assert schedule.cron == "TZ=Europe/Paris 0 3 * * 1"
    assert schedule.max_concurrent_run_count == 1 and schedule.max_run_count == 52
    scheduled = schedule.create_pipeline_job_request.pipeline_job
    assert scheduled.service_account == "sa@p.iam.gserviceaccount.com"
    assert dict(scheduled.labels) == {"team": "ml", "env": "prod"}
    assert scheduled.runtime_config.parameter_values["warm_start"] == "latest"
    assert scheduled.runtime_config.gcs_output_directory == ROOT
    assert created.resource_name == "projects/my-project/locations/us-central1/schedules/123"
    assert api.pipeline_jobs == []  # a schedule creates runs later, not now


def test_cli_submit_and_schedule_build_the_same_requests(monkeypatch, capsys):
    api = FakeVertexAPI(monkeypatch)
    common = [
        "--project",
        "my-project",
        "--region",
        "europe-west4",
        "--pipeline-root",
        ROOT,
        "--image",
        IMAGE,
        "--tpu",
        "v5litepod-4",
        "--experimental-tpu",
        "--data",
        "gs://bucket/x.csv",
        "--label",
        "y",
        "--job-label",
        "team=ml",
        "--service-account",
        "sa@p.iam.gserviceaccount.com",
        "--set",
        "training.train_steps=500",
        "--no-preflight",  # its data is not there to prepare (tests/pipelines/test_preflight_cli.py)
    ]
    assert cli.main(["submit", *common], credentials=AnonymousCredentials()) == 0
    [request] = api.pipeline_jobs
    sent = request["pipeline_job"]
    assert request["parent"] == "projects/my-project/locations/europe-west4"
    assert TrainSpec.from_json(sent.runtime_config.parameter_values["train_spec"]).job.training.train_steps == 500
    assert sent.runtime_config.parameter_values["publish_root"] == f"{ROOT}/published"
    assert dict(sent.labels) == {"team": "ml"}
    spec = dict(sent.pipeline_spec)
    pool = spec["components"]["comp-evaluate-model"]["inputDefinitions"]["parameters"]["worker_pool_specs"]
    assert pool["defaultValue"][0]["machine_spec"]["machine_type"] == "ct5lp-hightpu-4t"
    assert "submitted projects/my-project/locations/europe-west4/pipelineJobs/" in capsys.readouterr().out

    assert (
        cli.main(
            ["schedule", *common, "--cron", "0 3 * * *", "--warm-start", "latest"],
            credentials=AnonymousCredentials(),
        )
        == 0
    )
    [schedule] = api.schedules
    assert schedule["schedule"].cron == "0 3 * * *"
    assert (
        schedule["schedule"].create_pipeline_job_request.pipeline_job.runtime_config.parameter_values["warm_start"]
        == "latest"
    )


def test_cli_dry_run_prints_the_request_and_sends_nothing(monkeypatch, capsys):
    api = FakeVertexAPI(monkeypatch)
    argv = ["submit", "--project", "p", "--pipeline-root", ROOT, "--image", IMAGE, "--cpu", "--dry-run"]
    assert cli.main(argv, credentials=AnonymousCredentials()) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["runtimeConfig"]["gcsOutputDirectory"] == ROOT
    values = printed["runtimeConfig"]["parameterValues"]
    assert PrepareSpec.from_json(values["prepare_spec"]).prepare.data == ("embedded:penguins",)
    job = json.loads(values["train_spec"])["job"]  # the text sent: ints written as ints
    assert job["model"]["hidden_units"] == [64, 32] and job["tpu"]["num_cores"] == 8
    assert all(type(v) is int for v in [*job["model"]["hidden_units"], job["tpu"]["num_cores"]])
    assert api.pipeline_jobs == [] and api.schedules == []


def test_request_validation_messages():
    with pytest.raises(ValueError, match="must be a gs:// prefix"):
        target(pipeline_root="/tmp/root")
    with pytest.raises(ValueError, match="label key 'Team' is invalid"):
        target(labels={"Team": "ml"})
    with pytest.raises(ValueError, match="values may hold only lowercase"):
        target(labels={"team": "ML Ops"})
    with pytest.raises(ValueError, match="--cron '0 3 \\* \\*' must have 5 fields"):
        vertex.check_cron("0 3 * *")
    with pytest.raises(ValueError, match="--job-label 'team' must look like KEY=VALUE"):
        vertex.parse_label("team")


def test_cli_without_credentials(monkeypatch, tmp_path, capsys):
    """--dry-run needs no credentials; a real submit without any says how to get them (and sends nothing)."""
    api = FakeVertexAPI(monkeypatch)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    argv = ["submit", "--project", "p", "--pipeline-root", ROOT, "--image", IMAGE, "--cpu"]
    assert cli.main([*argv, "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["displayName"] == "tpu-estimator-pipeline"
    assert cli.main(argv) == 2
    assert "no Google Cloud credentials; run `gcloud auth application-default login`" in capsys.readouterr().err
    assert api.pipeline_jobs == []
