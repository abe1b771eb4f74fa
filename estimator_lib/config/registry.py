"""`RegistryConfig`: which Vertex AI Model Registry model a published model becomes a version of."""

from __future__ import annotations

import dataclasses

from estimator_lib.config.base import JsonConfig, require

MAX_DISPLAY_NAME = 128  # Vertex AI's limit on a Model's display name


@dataclasses.dataclass(frozen=True)
class RegistryConfig(JsonConfig):
    """Where blessed models are registered.

    Attributes:
      display_name: the registry model (parent model) every version is uploaded to; created by the first
        upload when no model of that display name exists in the region.
      serving_image: the prediction container; "" takes Vertex AI's prebuilt TensorFlow 2.15 CPU image in the
        Artifact Registry multi-region of the pipeline's region (`estimator_lib.registry.serving_image`).
      description: the registry model's description.
    """

    display_name: str
    serving_image: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        require(
            bool(self.display_name.strip()),
            "--model-registry is empty; give the display name of the registry model to add versions to",
        )
        require(
            len(self.display_name) <= MAX_DISPLAY_NAME,
            f"--model-registry {self.display_name[:20]!r}... is {len(self.display_name)} characters; Vertex AI "
            f"allows {MAX_DISPLAY_NAME}",
        )
