"""Register stage (Vertex AI only): a blessed, published model becomes a new version of a Model Registry model.

A thin adapter over `estimator_lib.cloud.model_registry.register`. It reads the release stage's `publication` (whose
metadata says whether and where the model was published), the export's fingerprint and the evaluation's blessing,
and uploads the published SavedModel directory itself. It runs after the release stage, so only a run that
succeeded everywhere registers anything. Nothing is registered for an unblessed model; the output then holds a
registration.json saying why.
"""

from kfp.dsl import Artifact, Dataset, Input, Model, Output

from components.artifact_types import ModelBlessing


def register_model(
    dataset: Input[Dataset],
    exported: Input[Model],
    blessing: Input[ModelBlessing],
    publication: Input[Artifact],
    registry: dict,
    project: str,
    location: str,
    pipeline_job: str,
    registered: Output[Model],
):
    """Uploads the published model as the new default version of the registry model `registry` names.

    Args:
      dataset: the prepared dataset (its fingerprint labels the version).
      exported: the export stage's Model (its fingerprint labels the version).
      blessing: the evaluation's verdict.
      publication: the release stage's record; `published_uri` and `published_version` in its metadata.
      registry: a `RegistryConfig` as JSON: the registry model's display name, the serving image.
      project, location: the pipeline's project and region (Vertex AI fills them in at run time).
      pipeline_job: the pipeline run's ID, recorded as a label.
      registered: output; a registered model's uri is the SavedModel directory the version serves, and its
        metadata names the registry model and version; otherwise registration.json says why there is none.
    """
    from components import adapter, artifacts
    from estimator_lib.cloud import model_registry
    from estimator_lib.config.registry import RegistryConfig

    config = RegistryConfig.from_dict(registry)
    published_uri = publication.metadata.get("published_uri", "")
    reason = model_registry.skip_reason(adapter.read_blessing(blessing.uri).blessed, published_uri)
    if reason:
        artifacts.describe_registration(registered, model_registry.Registration(False, reason))
        return
    fingerprints = {
        "dataset": dataset.metadata["fingerprint"],
        "model": exported.metadata["fingerprint"],
        "blessing": blessing.metadata["fingerprint"],
    }
    version = publication.metadata["published_version"]
    labels = model_registry.version_labels(fingerprints, version, pipeline_job)
    client = model_registry.model_service_client(location)
    result = model_registry.register(client, config, project, location, published_uri, labels, f"published {version}")
    artifacts.describe_registration(registered, result)
