"""A published model as a new version of one Vertex AI Model Registry model.

The registry is where Vertex AI users deploy from, compare versions and move aliases. A blessed, published
model (a complete, immutable SavedModel under the publish root, see `release`) becomes a new version of the
registry model named by `RegistryConfig.display_name` (the parent model; the first upload creates it), served
by Vertex AI's prebuilt TensorFlow 2.15 CPU prediction container, labelled with the run's content
fingerprints, and given the alias "default", which moves the registry's default version to it.

Only blessed models are registered: the registry mirrors the publish root, whose versions are exactly the
blessed models, and an upload points at that immutable copy, not at a run's artifact that a clean-up of the
pipeline root may delete. An unblessed model is not uploaded at all (rather than uploaded without the alias):
a version nobody may deploy would only crowd the version list.

`register` is idempotent: a version whose `model-sha256` label matches the model is not uploaded again (a
retried pipeline step registers nothing new). The requests are built by pure functions (`upload_request`) and
sent through a `ModelServiceClient` the caller passes in (`model_service_client` makes the real one). Only the
register step imports this module, so nothing else in the library loads google-cloud-aiplatform.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, Mapping, Optional

from google.cloud import aiplatform_v1
from google.protobuf import json_format

from estimator_lib.config.registry import RegistryConfig

DEFAULT_ALIAS = "default"
# Vertex AI's prebuilt prediction containers live in the us, europe and asia Artifact Registry multi-regions.
SERVING_IMAGE = "{multi_region}-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
SERVING_MULTI_REGIONS = ("us", "europe", "asia")
# Vertex AI label values: at most 63 characters of lowercase letters, digits, "_" and "-". A sha256 is 64 hex
# digits, so fingerprints are cut to their first 32 (128 bits: no two models of one registry collide).
MAX_LABEL_VALUE = 63
HASH_CHARS = 32
MODEL_LABEL = "model-sha256"
UPLOAD_TIMEOUT_SECONDS = 1800


@dataclasses.dataclass(frozen=True)
class Registration:
    """What the registry step did.

    Attributes:
      registered: whether the model is in the registry now (uploaded by this call or found there).
      reason: one line saying what happened and why.
      model: the registry model's resource name ("projects/P/locations/L/models/ID"), or "".
      version_id: the version's ID in that model, or "".
      artifact_uri: the SavedModel directory the version serves.
      request: the UploadModelRequest sent, as JSON (empty when nothing was uploaded).
    """

    registered: bool
    reason: str
    model: str = ""
    version_id: str = ""
    artifact_uri: str = ""
    request: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def version_name(self) -> str:
        """ "projects/P/locations/L/models/ID@VERSION", how Vertex AI names one version."""
        return f"{self.model}@{self.version_id}" if self.model else ""


def skip_reason(blessed: bool, published_uri: str) -> Optional[str]:
    """Why a model is not registered, or None when it is to be."""
    if not blessed:
        return "not registered: the model was not blessed (only blessed models get a registry version)"
    if not published_uri:
        return "not registered: the blessed model was not published (nothing immutable to point a version at)"
    return None


def serving_image(config: RegistryConfig, location: str) -> str:
    """The prediction container: the configured one, or the prebuilt TF 2.15 CPU image nearest `location`."""
    if config.serving_image:
        return config.serving_image
    prefix = location.split("-", 1)[0]
    return SERVING_IMAGE.format(multi_region=prefix if prefix in SERVING_MULTI_REGIONS else "us")


def label_value(text: str) -> str:
    """`text` as a Vertex AI label value: lowercase, other characters as "-", at most 63 characters."""
    return re.sub(r"[^a-z0-9_-]", "-", text.lower())[:MAX_LABEL_VALUE]


def version_labels(fingerprints: Mapping[str, str], published_version: str, pipeline_job: str) -> Dict[str, str]:
    """The labels of a version: "<name>-sha256" per fingerprint (first 32 hex digits), the published version
    and the pipeline run, so a version names exactly which data, model and run it came from."""
    labels = {f"{name}-sha256": label_value(digest[:HASH_CHARS]) for name, digest in sorted(fingerprints.items())}
    labels["published-version"] = label_value(published_version)
    if pipeline_job:
        labels["pipeline-job"] = label_value(pipeline_job)
    return {key: value for key, value in labels.items() if value}


def _location_path(project: str, location: str) -> str:
    return f"projects/{project}/locations/{location}"


def upload_request(
    config: RegistryConfig,
    project: str,
    location: str,
    artifact_uri: str,
    labels: Mapping[str, str],
    parent_model: Optional[str],
    version_description: str = "",
):
    """The `aiplatform_v1.UploadModelRequest` adding `artifact_uri` as the new default version.

    Args:
      config: the registry model and its serving container.
      project, location: where the registry model lives (the pipeline's project and region).
      artifact_uri: the SavedModel directory itself (saved_model.pb at its top), a gs:// URI.
      labels: the version's labels (`version_labels`).
      parent_model: the registry model's resource name; None creates the model with this as version 1.
      version_description: shown beside the version in the console.
    """
    model = aiplatform_v1.Model(
        display_name=config.display_name,
        description=config.description,
        version_description=version_description,
        artifact_uri=artifact_uri,
        container_spec=aiplatform_v1.ModelContainerSpec(image_uri=serving_image(config, location)),
        labels=dict(labels),
        version_aliases=[DEFAULT_ALIAS],
    )
    return aiplatform_v1.UploadModelRequest(
        parent=_location_path(project, location), parent_model=parent_model or "", model=model
    )


def model_service_client(location: str) -> Any:
    """A Model Registry client for `location`'s regional endpoint (credentials from the environment)."""
    return aiplatform_v1.ModelServiceClient(client_options={"api_endpoint": f"{location}-aiplatform.googleapis.com"})


def find_parent_model(client: Any, project: str, location: str, display_name: str) -> Optional[str]:
    """The resource name of the one registry model called `display_name`, or None when there is none.

    Raises:
      ValueError: several models have that display name (the registry cannot tell which to add to).
    """
    found = [
        m.name
        for m in client.list_models(
            request={"parent": _location_path(project, location), "filter": f'display_name="{display_name}"'}
        )
    ]
    if len(found) > 1:
        raise ValueError(
            f"--model-registry {display_name!r}: {len(found)} registry models have this display name ({found}); "
            "rename all but one in the console, or register under another name"
        )
    return found[0] if found else None


def find_version(client: Any, parent_model: str, labels: Mapping[str, str]) -> Optional[Any]:
    """The version of `parent_model` already carrying this model's fingerprint label, or None."""
    fingerprint = labels.get(MODEL_LABEL)
    if not fingerprint:
        return None
    versions = client.list_model_versions(
        request={"name": parent_model, "filter": f'labels.{MODEL_LABEL}="{fingerprint}"'}
    )
    return next(iter(versions), None)


def register(
    client: Any,
    config: RegistryConfig,
    project: str,
    location: str,
    artifact_uri: str,
    labels: Mapping[str, str],
    version_description: str = "",
) -> Registration:
    """Uploads `artifact_uri` as the new default version of the registry model (unless it is there already).

    Args:
      client: an `aiplatform_v1.ModelServiceClient` for `location`.
      config, project, location, artifact_uri, labels, version_description: see `upload_request`.
    """
    parent_model = find_parent_model(client, project, location, config.display_name)
    if parent_model:
        existing = find_version(client, parent_model, labels)
        if existing is not None:
            return Registration(
                True,
                f"already registered: version {existing.version_id} of {parent_model} has this model's fingerprint",
                model=parent_model,
                version_id=existing.version_id,
                artifact_uri=existing.artifact_uri,
            )
    request = upload_request(config, project, location, artifact_uri, labels, parent_model, version_description)
    response = client.upload_model(request=request).result(timeout=UPLOAD_TIMEOUT_SECONDS)
    return Registration(
        True,
        f"registered version {response.model_version_id} of {response.model} with alias {DEFAULT_ALIAS!r}",
        model=response.model,
        version_id=response.model_version_id,
        artifact_uri=artifact_uri,
        request=request_json(request),
    )


def request_json(request: Any) -> Dict[str, Any]:
    """A request proto as the JSON the API receives (camelCase field names)."""
    return json_format.MessageToDict(type(request).pb(request))
