"""The run-cost step of a Vertex AI run: compiled after release with the stages' machines, and its task run
through KFP's executor against tests/vertex_api.py's fake API, reading the run's task details and writing
run_cost.json priced with the shipped table (or a given one); an API error is recorded, never raised."""

from __future__ import annotations

import datetime
import json

import google.auth
import pytest
from compiled import STAGE_TASKS, compiled_spec
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform.compat.services import pipeline_service_client_v1
from google.cloud.aiplatform.compat.types import pipeline_job_v1
from kfp.dsl.executor import Executor
from vertex_api import FakeVertexAPI

from components.run_cost import record_run_cost
from estimator_lib.cloud import cost
from pipelines import vertex
from pipelines.tpu import TPUTarget, preset

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "cd" * 32
JOB = "projects/my-project/locations/us-central1/pipelineJobs/tpu-estimator-pipeline-20261125"
CPU = {"spot": False, "dataflow": False}
V3_8_SPOT = {**CPU, "machineType": "cloud-tpu", "accelerator": {"type": "TPU_V3", "count": 8.0}, "spot": True}
T0 = datetime.datetime(2026, 11, 25, 10, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(scope="module")
def v3_8_spot_task(tmp_path_factory) -> dict:
    """The run-cost task of a v3-8 Spot compile."""
    output = tmp_path_factory.mktemp("compiled") / "pipeline.yaml"
    spec = compiled_spec(str(output), "--image", IMAGE, "--tpu", "v3-8", "--spot")
    return spec["root"]["dag"]["tasks"]["record-run-cost"]


def test_the_cost_task_runs_after_release_with_each_stages_machine(v3_8_spot_task):
    assert v3_8_spot_task["dependentTasks"] == ["release-model"]
    assert v3_8_spot_task["cachingOptions"] == {}  # every run records its own
    parameters = v3_8_spot_task["inputs"]["parameters"]
    assert parameters["pipeline_job"] == {"runtimeValue": {"constant": "{{$.pipeline_job_resource_name}}"}}
    assert parameters["location"] == {"runtimeValue": {"constant": "{{$.pipeline_google_cloud_location}}"}}
    assert parameters["stages"]["runtimeValue"]["constant"] == STAGE_TASKS
    placement = parameters["placement"]["runtimeValue"]["constant"]
    assert placement == {s: V3_8_SPOT if s in ("train", "evaluate", "batch_predict") else CPU for s in placement}
    # billed as --dry-run's plan places them
    target = vertex.VertexTarget(project="p", location="us-central1", pipeline_root="gs://b/r")
    planned = vertex.describe_run(target, "t.yaml", IMAGE, TPUTarget(preset("v3-8"), spot=True))["stages"]
    assert {s: cost.machine_of(p) for s, p in placement.items()} == {s: cost.machine_of(p) for s, p in planned.items()}


def task(name: str, state: str, start: float, end: float | None) -> pipeline_job_v1.PipelineTaskDetail:
    """A task detail that started `start` and ended `end` seconds after T0."""
    ended = {"end_time": T0 + datetime.timedelta(seconds=end)} if end is not None else {}
    return pipeline_job_v1.PipelineTaskDetail(
        task_name=name, state=state, start_time=T0 + datetime.timedelta(seconds=start), **ended
    )


TASKS = [
    task("resolve-inputs", "SUCCEEDED", 0, 90),
    task("prepare-data", "SKIPPED", 90, 91),  # started no machine
    task("train-model", "SUCCEEDED", 91, 1891.5),
    task("evaluate-model", "SUCCEEDED", 1900, 2260),
    task("batch-predict", "SUCCEEDED", 1900, 2080),
    task("export-model", "SUCCEEDED", 1900, 1960),
    task("check-serving", "SUCCEEDED", 2080, 2140),
    task("release-model", "SUCCEEDED", 2260, 2290),
    task("join-experiment", "SUCCEEDED", 0, 45),
    task("record-run-cost", "RUNNING", 2300, None),
    task("tpu-estimator-pipeline", "RUNNING", 0, None),
]


def vertex_run(monkeypatch, tasks=TASKS, error: Exception | None = None) -> None:
    """The fake API's PipelineJob JOB, with `tasks`, or answering `error`."""
    FakeVertexAPI(monkeypatch)
    monkeypatch.setattr(google.auth, "default", lambda *a, **k: (AnonymousCredentials(), "my-project"))

    def get_pipeline_job(self, name, **_):
        if error is not None:
            raise error
        return pipeline_job_v1.PipelineJob(
            name=name, state="PIPELINE_STATE_RUNNING", job_detail={"task_details": tasks}
        )

    monkeypatch.setattr(pipeline_service_client_v1.PipelineServiceClient, "get_pipeline_job", get_pipeline_job)


def run_task(tmp_path, placement: dict) -> tuple[dict, dict]:
    """Runs the task's function as Vertex AI would, through KFP's executor: (run_cost.json, its metadata)."""
    uri = str(tmp_path / "run_cost")
    parameters = {"pipeline_job": JOB, "location": "us-central1", "stages": STAGE_TASKS, "placement": placement}
    artifact = {"name": "run_cost", "type": {"schemaTitle": "system.Artifact"}, "uri": uri, "metadata": {}}
    executor_input = {
        "inputs": {"parameterValues": parameters},
        "outputs": {"artifacts": {"run_cost": {"artifacts": [artifact]}}, "outputFile": str(tmp_path / "out.json")},
    }
    Executor(executor_input=executor_input, function_to_execute=record_run_cost).execute()
    with open(tmp_path / "out.json", encoding="utf-8") as f:
        [written] = json.load(f)["artifacts"]["run_cost"]["artifacts"]
    with open(tmp_path / "run_cost" / "run_cost.json", encoding="utf-8") as f:
        return json.load(f), written["metadata"]


def test_the_record_prices_the_measured_seconds_with_the_shipped_table(monkeypatch, tmp_path):
    vertex_run(monkeypatch)
    # n1-standard-4 is the one machine the shipped table prices (0.21849885 an hour in us-central1)
    n1 = {**CPU, "machineType": "n1-standard-4"}
    record, metadata = run_task(tmp_path, {"resolve": n1, "prepare": n1, "train": V3_8_SPOT, "release": CPU})
    assert record["stages"]["resolve"] == {
        "machine": "n1-standard-4",
        "accelerator": None,
        "spot": False,
        "seconds": 90.0,
        "hours": 0.025,
        "hoursBasis": "measured",
        "pricePerHour": 0.21849885,
        "cost": 0.005462,  # round(0.025 * 0.21849885, 6)
        "missing": None,
    }
    assert round(90 / 3600 * 0.21849885, 6) == 0.005462
    assert (record["stages"]["train"]["seconds"], record["stages"]["train"]["accelerator"]) == (1800.5, "TPU_V3 x8")
    assert set(record["stages"]) == {"resolve", "train", "release"} and record["notRun"] == ["prepare"]
    assert record["otherTasks"] == {"join-experiment": 45.0}
    assert (record["total"], record["complete"], record["error"]) == (round(0.005462 + 0.03, 6), False, "")
    assert record["missing"] == [
        "no price for cloud-tpu + TPU_V3 x8 (Spot) in region us-central1",
        "no price for e2-standard-4 in region us-central1",
    ]
    assert record["priceTable"] == {
        "date": "2026-11-25",
        "source": "https://cloud.google.com/vertex-ai/pricing",
        "file": cost.PRICES_FILE,
    }
    assert metadata == {
        "record_uri": str(tmp_path / "run_cost" / "run_cost.json"),
        "total": 0.035462,
        "currency": "USD",
        "complete": False,
        "missing": 2,
        "price_table_date": "2026-11-25",
        "error": "",
    }


def test_with_a_table_that_prices_every_machine_the_total_is_complete(monkeypatch, tmp_path):
    machines = [
        {"region": "us-central1", "machineType": "cloud-tpu", "accelerator": "TPU_V3 x8", "onDemand": 8.0, "spot": 2.4},
        {"region": "us-central1", "machineType": "e2-standard-4", "accelerator": None, "onDemand": 0.2, "spot": None},
    ]
    prices = tmp_path / "prices.json"
    body = {"date": "2026-01-02", "source": "https://example.test/prices", "currency": "USD", "machines": machines}
    prices.write_text(json.dumps({**body, "runFee": {"price": 0.03}}), encoding="utf-8")
    monkeypatch.setattr(cost, "PRICES_FILE", str(prices))
    vertex_run(monkeypatch)
    tpu_stages = ("train", "evaluate", "batch_predict")
    record, metadata = run_task(tmp_path, {s: V3_8_SPOT if s in tpu_stages else CPU for s in STAGE_TASKS.values()})
    costs = {stage: priced["cost"] for stage, priced in record["stages"].items()}
    assert costs == {
        "resolve": round(90 / 3600 * 0.2, 6),  # 0.005
        "train": round(1800.5 / 3600 * 2.4, 6),  # 1.200333
        "evaluate": round(360 / 3600 * 2.4, 6),  # 0.24
        "batch_predict": round(180 / 3600 * 2.4, 6),  # 0.12
        "export": round(60 / 3600 * 0.2, 6),  # 0.003333
        "serving_check": round(60 / 3600 * 0.2, 6),
        "release": round(30 / 3600 * 0.2, 6),  # 0.001667
    }
    assert record["total"] == round(0.005 + 1.200333 + 0.24 + 0.12 + 2 * 0.003333 + 0.001667 + 0.03, 6) == 1.603666
    assert (record["complete"], record["missing"], record["priceTable"]["date"]) == (True, [], "2026-01-02")
    assert (metadata["total"], metadata["complete"], metadata["missing"]) == (1.603666, True, 0)


def test_an_api_error_is_recorded_and_the_task_succeeds(monkeypatch, tmp_path):
    vertex_run(monkeypatch, error=exceptions.PermissionDenied("aiplatform.pipelineJobs.get denied on resource\nmore"))
    record, metadata = run_task(tmp_path, {s: CPU for s in STAGE_TASKS.values()})
    error = f"cannot read the task details of {JOB}: 403 aiplatform.pipelineJobs.get denied on resource"
    assert (record["error"], metadata["error"]) == (error, error)
    assert (record["stages"], record["notRun"], record["otherTasks"]) == ({}, list(STAGE_TASKS.values()), {})
    assert (record["total"], record["complete"]) == (0.03, False)
    assert record["missing"] == [error]
