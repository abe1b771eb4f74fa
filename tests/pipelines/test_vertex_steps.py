"""The Vertex AI-only steps (Experiment, Model Registry) in the compiled pipeline, the requests submit and
schedule send with them, and what --dry-run prints. The Vertex AI API is the fake of tests/vertex_api.py."""

from __future__ import annotations

import json

import google.auth
import pytest
from compiled import compiled_spec
from google.auth.credentials import AnonymousCredentials
from vertex_api import PIPELINE_JOB_ID, FakeVertexAPI

from components.experiment import join_experiment
from pipelines import cli

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "cd" * 32
ROOT = "gs://bucket/pipeline-root"
SA = "trainer@my-project.iam.gserviceaccount.com"
TENSORBOARD = "projects/my-project/locations/us-central1/tensorboards/42"
VERTEX = ["--project", "my-project", "--region", "us-central1", "--pipeline-root", ROOT, "--image", IMAGE]
TRACKING = [
    "--tensorboard",
    TENSORBOARD,
    "--service-account",
    SA,
    "--experiment",
    "churn-weekly",
    "--model-registry",
    "churn",
]


def compile_spec(tmp_path, *flags: str) -> dict:
    return compiled_spec(str(tmp_path / "pipeline.yaml"), "--image", IMAGE, *flags)


def constant(task: dict, name: str):
    return task["inputs"]["parameters"][name]["runtimeValue"]["constant"]


def test_the_compiled_steps(tmp_path):
    spec = compile_spec(tmp_path, "--cpu", "--experiment", "churn-weekly", "--model-registry", "churn")
    tasks = spec["root"]["dag"]["tasks"]
    join, register = tasks["join-experiment"], tasks["register-model"]
    assert "dependentTasks" not in join  # first: a run that fails later is in the experiment too
    assert constant(join, "experiment") == "churn-weekly"
    assert constant(join, "pipeline_job") == "{{$.pipeline_job_resource_name}}"
    # After the release stage: only a run that succeeded everywhere (and published) registers a version.
    assert register["dependentTasks"] == ["evaluate-model", "export-model", "prepare-data", "release-model"]
    artifacts = register["inputs"]["artifacts"]
    assert {name: a["taskOutputArtifact"]["producerTask"] for name, a in artifacts.items()} == {
        "dataset": "prepare-data",
        "exported": "export-model",
        "blessing": "evaluate-model",
        "publication": "release-model",
    }
    assert constant(register, "registry") == {"display_name": "churn", "serving_image": "", "description": ""}
    assert constant(register, "pipeline_job") == "{{$.pipeline_job_uuid}}"
    for task in (join, register):
        assert task["cachingOptions"] == {}  # not cached: each run joins and registers its own model
        assert constant(task, "project") == "{{$.pipeline_google_cloud_project_id}}"
        assert constant(task, "location") == "{{$.pipeline_google_cloud_location}}"
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {IMAGE}  # lightweight components on the project image, like every stage


def test_without_flags_there_are_no_vertex_steps(tmp_path):
    tasks = compile_spec(tmp_path, "--cpu")["root"]["dag"]["tasks"]
    assert "join-experiment" not in tasks and "register-model" not in tasks


def test_the_experiment_step_joins_the_running_job(monkeypatch):
    api = FakeVertexAPI(monkeypatch)
    monkeypatch.setattr(google.auth, "default", lambda *a, **k: (AnonymousCredentials(), "my-project"))
    job = f"projects/my-project/locations/us-central1/pipelineJobs/{PIPELINE_JOB_ID}"
    name = join_experiment(experiment="churn-weekly", project="my-project", location="us-central1", pipeline_job=job)
    store = "projects/my-project/locations/us-central1/metadataStores/default"
    assert name == f"{store}/contexts/churn-weekly"
    assert api.context_children == [
        {"context": f"{store}/contexts/churn-weekly", "child_contexts": [f"{store}/contexts/{PIPELINE_JOB_ID}"]}
    ]


def test_scheduled_runs_carry_the_experiment_and_registry_steps(monkeypatch, capsys):
    api = FakeVertexAPI(monkeypatch)
    argv = ["schedule", *VERTEX, "--cron", "0 3 * * 1", "--experiment", "churn-weekly", "--model-registry", "churn"]
    assert cli.main(argv, credentials=AnonymousCredentials()) == 0
    [request] = api.schedules
    scheduled = request["schedule"].create_pipeline_job_request.pipeline_job
    tasks = dict(scheduled.pipeline_spec)["root"]["dag"]["tasks"]
    assert {"join-experiment", "register-model"} <= set(tasks)
    assert api.context_children == []  # nothing joins at scheduling time: each run joins when it starts


def test_submit_sends_the_capacity_and_steps_in_the_pipeline_spec(monkeypatch):
    api = FakeVertexAPI(monkeypatch)
    argv = [
        "submit",
        *VERTEX,
        "--tpu",
        "v3-8",
        "--spot",
        *TRACKING,
    ]
    assert cli.main(argv, credentials=AnonymousCredentials()) == 0
    [request] = api.pipeline_jobs
    sent = request["pipeline_job"]
    assert sent.service_account == SA
    spec = dict(sent.pipeline_spec)
    params = spec["components"]["comp-train-model"]["inputDefinitions"]["parameters"]
    assert params["strategy"]["defaultValue"] == "SPOT"
    assert params["tensorboard"]["defaultValue"] == TENSORBOARD
    assert (
        params["base_output_directory"]["defaultValue"] == f"{ROOT}/tensorboard/{{{{$.pipeline_job_uuid}}}}/train-model"
    )
    assert {"join-experiment", "register-model"} <= set(spec["root"]["dag"]["tasks"])


def test_dry_run_prints_the_compiled_settings(capsys):
    argv = [
        "submit",
        *VERTEX,
        "--tpu",
        "v5litepod-16",
        "--experimental-tpu",
        "--reservation",
        "projects/my-project/zones/us-central1-a/reservations/r1",
        *TRACKING,
        "--dry-run",
    ]
    assert cli.main(argv, credentials=AnonymousCredentials()) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["serviceAccount"] == SA
    assert printed["compiled"] == {
        "experiment": "churn-weekly",
        "modelRegistry": {"display_name": "churn", "serving_image": "", "description": ""},
        "tpuJobs": {
            "tpu": "v5litepod-16",
            "machineSpec": {
                "machine_type": "ct5lp-hightpu-4t",
                "accelerator_type": "TPU_V5_LITEPOD",
                "accelerator_count": 4,
                "tpu_topology": "4x4",
                "reservation_affinity": {
                    "reservation_affinity_type": "SPECIFIC_RESERVATION",
                    "key": "compute.googleapis.com/reservation-name",
                    "values": ["projects/my-project/zones/us-central1-a/reservations/r1"],
                },
            },
            "scheduling": {"strategy": "STANDARD"},
            "env": {"NEXT_PLUGGABLE_DEVICE_USE_C_API": "true", "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/lib/libtpu.so"},
            "tensorboard": TENSORBOARD,
            "baseOutputDirectory": f"{ROOT}/tensorboard/PIPELINE_JOB_UUID/STAGE",
        },
        "retryPolicy": {"retries": 2, "backoff_seconds": 60, "backoff_factor": 2.0, "max_backoff_seconds": 3600},
    }


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--experiment", "Churn_Weekly"], "--experiment 'Churn_Weekly' must be 4-128 characters of lowercase"),
        (["--tensorboard", TENSORBOARD], "--tensorboard needs the TPU jobs to run as a service account"),
        (
            ["--tensorboard", TENSORBOARD.replace("us-central1", "europe-west4"), "--service-account", SA],
            "is in europe-west4, but the run is in --region us-central1",
        ),
        (["--cpu", "--tensorboard", TENSORBOARD], "--tensorboard applies to the TPU custom jobs"),
        (["--serving-image", IMAGE], "--serving-image is the registered versions' container: give --model-registry"),
        (["--model-registry", ""], "--model-registry is empty"),
        (
            ["--template", "p.yaml", "--spot"],
            "--spot is applied when the pipeline is compiled, and --template p.yaml is compiled already",
        ),
    ],
)
def test_refusals_name_the_fix(monkeypatch, capsys, flags, message):
    api = FakeVertexAPI(monkeypatch)
    assert cli.main(["submit", *VERTEX, *flags], credentials=AnonymousCredentials()) == 2
    assert message in capsys.readouterr().err
    assert api.pipeline_jobs == []
