"""The Model Registry request: exact UploadModelRequest, labels within Vertex AI's limits, parent model by display
name, idempotent re-registration. The only fake is the Model Registry service (`FakeModelService`,
tests/vertex_api.py), which records what would have been sent."""

from __future__ import annotations

import re

import pytest
from google.cloud import aiplatform_v1
from vertex_api import FakeModelService

from estimator_lib.cloud import model_registry
from estimator_lib.config.base import ConfigError
from estimator_lib.config.registry import RegistryConfig

PROJECT, LOCATION = "my-project", "europe-west4"
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
MODEL = f"{PARENT}/models/123"
URI = "gs://bucket/published/versions/20250101T120000000000Z-3f2a9c1b0d4e"
MODEL_SHA = "3f2a9c1b0d4e" + "a" * 52
DATASET_SHA = "b" * 64
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


def labels() -> dict:
    return model_registry.version_labels({"model": MODEL_SHA, "dataset": DATASET_SHA}, URI.rsplit("/", 1)[1], "run-1")


def test_upload_request_is_a_new_default_version_of_the_parent_model():
    config = RegistryConfig(display_name="churn", description="weekly churn model")
    request = model_registry.upload_request(config, PROJECT, LOCATION, URI, labels(), MODEL, "published v1")
    assert model_registry.request_json(request) == {
        "parent": PARENT,
        "parentModel": MODEL,
        "model": {
            "displayName": "churn",
            "description": "weekly churn model",
            "versionDescription": "published v1",
            "artifactUri": URI,  # the SavedModel directory itself (saved_model.pb at its top)
            "containerSpec": {"imageUri": "europe-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"},
            "labels": {
                "dataset-sha256": "b" * 32,
                "model-sha256": "3f2a9c1b0d4e" + "a" * 20,
                "published-version": "20250101t120000000000z-3f2a9c1b0d4e",
                "pipeline-job": "run-1",
            },
            "versionAliases": ["default"],
        },
    }


def test_a_first_upload_creates_the_model():
    request = model_registry.upload_request(RegistryConfig("churn"), PROJECT, "us-central1", URI, labels(), None)
    assert request.parent_model == ""
    assert request.model.container_spec.image_uri == "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
    assert list(request.model.version_aliases) == ["default"]


def test_serving_image_follows_the_region_and_can_be_set():
    assert model_registry.serving_image(RegistryConfig("m"), "asia-northeast1").startswith("asia-docker.pkg.dev/")
    assert model_registry.serving_image(RegistryConfig("m"), "northamerica-northeast1").startswith("us-docker.pkg.dev/")
    own = "us-central1-docker.pkg.dev/p/r/serve@sha256:" + "c" * 64
    assert model_registry.serving_image(RegistryConfig("m", serving_image=own), "europe-west4") == own


def test_labels_fit_vertex_ai_limits():
    made = model_registry.version_labels(
        {"model": "F" * 64, "dataset": "0" * 64},
        "20250101T120000000000Z-" + "X" * 80,
        "Pipeline Job/ID",
    )
    assert made["model-sha256"] == "f" * 32 and made["dataset-sha256"] == "0" * 32
    assert made["pipeline-job"] == "pipeline-job-id"
    assert len(made["published-version"]) == 63 and made["published-version"].startswith("20250101t120000000000z-x")
    assert all(LABEL_VALUE.match(v) for v in made.values())
    assert all(len(k) <= 63 and re.match(r"^[a-z][a-z0-9_-]*$", k) for k in made)
    assert "pipeline-job" not in model_registry.version_labels({"model": "a" * 64}, "v", "")


def test_register_adds_a_version_to_the_model_of_that_display_name():
    service = FakeModelService(models=[aiplatform_v1.Model(name=MODEL, display_name="churn")])
    done = model_registry.register(service, RegistryConfig("churn"), PROJECT, LOCATION, URI, labels(), "published v1")
    assert [name for name, _ in service.requests] == ["list_models", "list_model_versions", "upload_model"]
    assert service.requests[0][1] == {"parent": PARENT, "filter": 'display_name="churn"'}
    assert service.requests[1][1] == {"name": MODEL, "filter": f'labels.model-sha256="{"3f2a9c1b0d4e" + "a" * 20}"'}
    sent = service.requests[2][1]
    assert sent.parent_model == MODEL and sent.model.artifact_uri == URI
    assert (done.registered, done.model, done.version_id, done.version_name) == (True, MODEL, "7", f"{MODEL}@7")
    assert done.reason == f"registered version 7 of {MODEL} with alias 'default'"
    assert done.request["model"]["versionAliases"] == ["default"]


def test_register_creates_the_model_when_none_has_that_name():
    service = FakeModelService(models=[aiplatform_v1.Model(name=MODEL, display_name="other")])
    done = model_registry.register(service, RegistryConfig("churn"), PROJECT, LOCATION, URI, labels())
    assert [name for name, _ in service.requests] == ["list_models", "upload_model"]
    assert service.requests[1][1].parent_model == ""
    assert done.model == f"{PARENT}/models/456"


def test_register_again_uploads_nothing():
    existing = aiplatform_v1.Model(name=MODEL, version_id="3", artifact_uri=URI, labels=labels())
    service = FakeModelService(models=[aiplatform_v1.Model(name=MODEL, display_name="churn")], versions=[existing])
    done = model_registry.register(service, RegistryConfig("churn"), PROJECT, LOCATION, URI, labels())
    assert "upload_model" not in [name for name, _ in service.requests]
    assert done.registered and done.version_id == "3" and done.request == {}
    assert done.reason.startswith("already registered: version 3 of")


def test_two_models_of_one_name_are_refused():
    service = FakeModelService(
        models=[aiplatform_v1.Model(name=f"{PARENT}/models/{i}", display_name="churn") for i in (1, 2)]
    )
    with pytest.raises(ValueError, match="2 registry models have this display name"):
        model_registry.register(service, RegistryConfig("churn"), PROJECT, LOCATION, URI, labels())


def test_only_blessed_published_models_are_registered():
    assert model_registry.skip_reason(True, URI) is None
    assert model_registry.skip_reason(False, URI).startswith("not registered: the model was not blessed")
    assert model_registry.skip_reason(True, "").startswith("not registered: the blessed model was not published")


def test_registry_config_messages():
    with pytest.raises(ConfigError, match="--model-registry is empty"):
        RegistryConfig(" ")
    with pytest.raises(ConfigError, match="is 129 characters; Vertex AI allows 128"):
        RegistryConfig("m" * 129)
    assert RegistryConfig.from_dict(RegistryConfig("churn").to_dict()) == RegistryConfig("churn")
