"""The Vertex AI-only components through their Python functions, in-process: register (Model Registry) and the
TensorBoard copies of train/evaluate. The Model Registry service is the fake of
tests/lib/cloud/test_model_registry.py."""

from __future__ import annotations

import json
import os

import pytest
from google.cloud import aiplatform_v1
from kfp.dsl import Artifact, Dataset, Model
from vertex_api import FakeModelService

from components import adapter
from components.artifacts import REGISTRATION_FILE
from components.register import register_model
from estimator_lib.cloud import model_registry
from estimator_lib.config.registry import RegistryConfig
from estimator_lib.evaluation.blessing import Blessing, Check

MODEL_SHA, DATASET_SHA, BLESSING_SHA = "1" * 64, "2" * 64, "3" * 64
VERSION = "20250101T120000000000Z-111111111111"


@pytest.fixture
def service(monkeypatch):
    fake = FakeModelService(models=[aiplatform_v1.Model(name="projects/p/locations/l/models/9", display_name="churn")])
    monkeypatch.setattr(model_registry, "model_service_client", lambda location: fake)
    return fake


def inputs(tmp_path, blessed: bool):
    published = tmp_path / "published" / "versions" / VERSION
    published.mkdir(parents=True)
    (published / "saved_model.pb").write_bytes(b"graph")
    dataset = Dataset(name="dataset", uri=str(tmp_path / "dataset"), metadata={"fingerprint": DATASET_SHA})
    exported = Model(name="exported", uri=str(tmp_path / "exported"), metadata={"fingerprint": MODEL_SHA})
    publication = Artifact(
        name="publication",
        uri=str(tmp_path / "publication"),
        metadata={
            "published": blessed,
            "published_uri": str(published) if blessed else "",
            "published_version": VERSION if blessed else "",
        },
    )
    blessing = Artifact(name="blessing", uri=str(tmp_path / "blessing"), metadata={"fingerprint": BLESSING_SHA})
    check = Check("threshold", "accuracy", 0.9, 0.8, blessed, "threshold: accuracy")
    adapter.write_blessing(blessing.uri, Blessing(blessed, (check,), {"accuracy": 0.9}, "accuracy", 10))
    return dataset, exported, blessing, publication


def run(tmp_path, blessed: bool) -> Model:
    dataset, exported, blessing, publication = inputs(tmp_path, blessed)
    registered = Model(name="registered", uri=str(tmp_path / "registered"), metadata={})
    register_model(
        dataset=dataset,
        exported=exported,
        blessing=blessing,
        publication=publication,
        registry=RegistryConfig("churn").to_dict(),
        project="p",
        location="l",
        pipeline_job="run-1",
        registered=registered,
    )
    return registered


def test_a_blessed_model_becomes_a_version_and_its_artifact_is_the_saved_model(tmp_path, service):
    registered = run(tmp_path, blessed=True)
    published = str(tmp_path / "published" / "versions" / VERSION)
    assert registered.uri == published  # the SavedModel directory itself
    upload = next(request for name, request in service.requests if name == "upload_model")
    assert upload.parent_model == "projects/p/locations/l/models/9"
    assert upload.model.artifact_uri == published and list(upload.model.version_aliases) == ["default"]
    assert dict(upload.model.labels) == {
        "blessing-sha256": "3" * 32,
        "dataset-sha256": "2" * 32,
        "model-sha256": "1" * 32,
        "published-version": VERSION.lower(),
        "pipeline-job": "run-1",
    }
    assert registered.metadata["registered"] is True
    assert registered.metadata["version_name"] == "projects/p/locations/l/models/9@7"
    assert registered.metadata["request"]["model"]["artifactUri"] == published


def test_an_unblessed_model_is_not_registered(tmp_path, service):
    registered = run(tmp_path, blessed=False)
    assert service.requests == []  # the registry is not even asked
    assert registered.uri == str(tmp_path / "registered")
    with open(os.path.join(registered.uri, REGISTRATION_FILE), encoding="utf-8") as f:
        record = json.load(f)
    assert record["registered"] is False and record["reason"].startswith("not registered: the model was not blessed")
    assert registered.metadata["registered"] is False and registered.metadata["version_name"] == ""


def test_summaries_reach_the_tensorboard_upload_directory_only_in_a_tensorboard_job(tmp_path, monkeypatch):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "events.out.tfevents.1.host").write_bytes(b"train")
    monkeypatch.delenv(adapter.TENSORBOARD_LOG_DIR_ENV, raising=False)
    assert adapter.copy_summaries_to_tensorboard(str(model_dir), "train") == []
    monkeypatch.setenv(adapter.TENSORBOARD_LOG_DIR_ENV, str(tmp_path / "logs"))
    assert adapter.copy_summaries_to_tensorboard(str(model_dir), "train") == [
        str(tmp_path / "logs" / "train" / "events.out.tfevents.1.host")
    ]
