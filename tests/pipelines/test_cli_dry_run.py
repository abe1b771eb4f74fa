"""`submit --dry-run` and `schedule --dry-run` say where the job runs: project, region, template, image, and per
stage the machine, the accelerator, Spot, and the TPU settings the stage runs with. Nothing is sent (the Vertex AI
API is the fake of tests/vertex_api.py)."""

from __future__ import annotations

import json

import pytest
from google.auth.credentials import AnonymousCredentials
from vertex_api import FakeVertexAPI

from pipelines import cli

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "cd" * 32
ROOT = "gs://bucket/pipeline-root"
COMMON = ["--project", "proj", "--region", "europe-west4", "--pipeline-root", ROOT, "--image", IMAGE, "--dry-run"]
CPU_STAGE = {
    "runsOn": "pipeline task (CPU)",
    "machineType": None,
    "accelerator": None,
    "spot": False,
    "tpu": {"use_tpu": False},
    "dataflow": False,
}


def dry_run(monkeypatch, capsys, *argv: str) -> dict:
    api = FakeVertexAPI(monkeypatch)
    assert cli.main([*argv, *COMMON], credentials=AnonymousCredentials()) == 0
    assert api.pipeline_jobs == [] and api.schedules == []
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("command", [["submit"], ["schedule", "--cron", "0 3 * * 1"]])
def test_dry_run_names_project_region_template_image_and_each_stage_machine(command, monkeypatch, capsys):
    printed = dry_run(monkeypatch, capsys, *command, "--tpu", "v3-8", "--spot")
    plan = printed["plan"]
    assert {k: plan[k] for k in ("project", "region", "pipelineRoot", "image")} == {
        "project": "proj",
        "region": "europe-west4",
        "pipelineRoot": ROOT,
        "image": IMAGE,
    }
    assert plan["template"] == (
        "tpu_estimator_pipeline.yaml, compiled now from this checkout (`tpu-pipeline compile` keeps one)"
    )
    tpu_stage = {
        "runsOn": "custom job (TPU)",
        "machineType": "cloud-tpu",
        "accelerator": {"type": "TPU_V3", "count": 8, "topology": None},
        "spot": True,
        "tpu": {"use_tpu": True, "tpu_name": "local", "num_cores": 8},
        "dataflow": False,
    }
    assert {
        name: {k: v for k, v in stage.items() if k != "estimatedCost"} for name, stage in plan["stages"].items()
    } == {
        "resolve": CPU_STAGE,
        "prepare": CPU_STAGE,
        "train": tpu_stage,
        "evaluate": tpu_stage,
        "batch_predict": tpu_stage,
        "export": CPU_STAGE,
        "serving_check": CPU_STAGE,
        "release": CPU_STAGE,
    }
    assert {name: stage["estimatedCost"]["machine"] for name, stage in plan["stages"].items()} == {
        name: "cloud-tpu" if name in ("train", "evaluate", "batch_predict") else "e2-standard-4"
        for name in plan["stages"]
    }  # each stage's cost: tests/pipelines/test_cost.py
    # The train spec used to keep RunConfig's CPU default (use_tpu false) although the compiled pipeline places
    # train on the TPU; the spec sent now says where it trains.
    tpu = json.loads(printed["runtimeConfig"]["parameterValues"]["train_spec"])["job"]["tpu"]
    assert (tpu["use_tpu"], tpu["tpu_name"], tpu["num_cores"]) == (True, "local", 8)


def test_a_cpu_run_on_dataflow_has_no_accelerator(monkeypatch, capsys):
    printed = dry_run(monkeypatch, capsys, "submit", "--cpu", "--engine", "beam")
    plan = printed["plan"]
    assert json.loads(printed["runtimeConfig"]["parameterValues"]["train_spec"])["job"]["tpu"]["use_tpu"] is False
    assert set(plan["stages"]) == {
        "resolve",
        "prepare",
        "train",
        "evaluate",
        "batch_predict",
        "export",
        "serving_check",
        "release",
    }
    assert all(stage["accelerator"] is None and not stage["spot"] for stage in plan["stages"].values())
    assert [name for name, stage in plan["stages"].items() if stage["dataflow"]] == [
        "batch_predict",
        "prepare",
    ]  # keys sorted
