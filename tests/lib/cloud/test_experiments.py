"""A running pipeline joins a Vertex AI Experiment: the Metadata requests google-cloud-aiplatform sends, caught
by the fake Vertex AI API (tests/vertex_api.py)."""

from __future__ import annotations

from google.auth.credentials import AnonymousCredentials
from vertex_api import PIPELINE_JOB_ID, FakeVertexAPI

from estimator_lib.cloud import experiments

LOCATION_PATH = "projects/my-project/locations/us-central1"
STORE = f"{LOCATION_PATH}/metadataStores/default"
JOB = f"{LOCATION_PATH}/pipelineJobs/{PIPELINE_JOB_ID}"


def test_a_run_joins_a_new_experiment(monkeypatch):
    api = FakeVertexAPI(monkeypatch)
    name = experiments.join_experiment(
        "churn-weekly", JOB, "my-project", "us-central1", credentials=AnonymousCredentials()
    )
    assert name == f"{STORE}/contexts/churn-weekly"
    [created] = api.created_contexts
    assert created["parent"] == STORE and created["context_id"] == "churn-weekly"
    assert created["context"].schema_title == "system.Experiment"
    assert created["context"].display_name == "churn-weekly"
    assert api.context_children == [
        {"context": f"{STORE}/contexts/churn-weekly", "child_contexts": [f"{STORE}/contexts/{PIPELINE_JOB_ID}"]}
    ]


def test_a_second_run_joins_the_same_experiment(monkeypatch):
    api = FakeVertexAPI(monkeypatch)
    for job_id in ("run-1", "run-2"):
        experiments.join_experiment(
            "churn-weekly",
            f"{LOCATION_PATH}/pipelineJobs/{job_id}",
            "my-project",
            "us-central1",
            credentials=AnonymousCredentials(),
        )
    assert len(api.created_contexts) == 1  # created once, then found
    assert [c["child_contexts"] for c in api.context_children] == [
        [f"{STORE}/contexts/run-1"],
        [f"{STORE}/contexts/run-2"],
    ]
