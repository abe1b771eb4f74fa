"""The components' adapter: KFP parameters and artifact URIs in, the typed `estimator_lib` configs out.

KFP hands a component its parameters as JSON: dict and list parameters travel as protobuf Structs, whose numbers
are all floats, and configs travel without their null fields. This module turns them back into the frozen
configs a library call takes, records the training config beside the checkpoints (later stages rebuild the same
model from it), writes and reads the evaluation's verdict, writes the release's record, and refuses to go on
when a file an earlier stage must have written is missing. It holds no ML logic; `components.artifacts`
describes the outputs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from components.records import JOB_CONFIG_FILE
from estimator_lib import storage, summaries
from estimator_lib.config import (
    BlessingConfig,
    JobConfig,
    PrepareConfig,
    TPUSettings,
    ValidationConfig,
    hyperparameter_overrides,
    set_dotted,
)
from estimator_lib.config.base import typed_fields
from estimator_lib.config.run import AUTO_TASK, NO_MODEL
from estimator_lib.data.embedded import resolve_data
from estimator_lib.evaluation import Blessing
from estimator_lib.release import Release

BLESSING_FILE = "blessing.json"
# Set by Vertex AI in a custom job that has a TensorBoard: the directory its uploader reads.
TENSORBOARD_LOG_DIR_ENV = "AIP_TENSORBOARD_LOG_DIR"
PUBLICATION_FILE = "publication.json"


class OutputMissingError(RuntimeError):
    """A stage finished but its output is not where it must be."""


def require_output(uri: str, what: str) -> None:
    """Raises `OutputMissingError` naming `what` unless `uri` exists."""
    if not storage.exists(uri):
        raise OutputMissingError(f"{what} was not written: {uri} does not exist; the stage failed silently")


def typed(cls: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` for dataclass `cls` with whole floats turned back into ints where `cls` declares ints: KFP carries
    dict and list parameters as protobuf Structs, whose numbers are all floats (`config.typed_fields`)."""
    return typed_fields(cls, data)


def placement(tpu: Mapping[str, Any]) -> dict[str, Any]:
    """{"use_tpu": True, ...} -> {"tpu.use_tpu": True, ...}: a stage's TPU placement as config overrides."""
    return {f"tpu.{key}": value for key, value in tpu.items()}


def training_job(
    job_config: Mapping[str, Any],
    hyperparameters: Mapping[str, Any],
    tpu: Mapping[str, Any],
    warm_start_from: str | None = None,
) -> JobConfig:
    """The job config for training. Later wins: the full config, the pipeline's hyperparameter parameters, the
    warm-start source, the stage's placement.

    Args:
      job_config: a `JobConfig.to_dict()` (empty for the defaults).
      hyperparameters: the pipeline's hyperparameter parameters ({"train_steps": 300}; see
        `estimator_lib.config.HYPERPARAMETERS`).
      tpu: this stage's `tpu` settings ({} keeps the config's).
      warm_start_from: a SavedModel directory to initialise from; None keeps the config's.
    """
    overrides = hyperparameter_overrides(hyperparameters)
    if warm_start_from is not None:
        overrides["training.warm_start_from"] = warm_start_from
    merged = json.loads(json.dumps(job_config))  # a deep copy: the parameter is not ours to change
    for dotted, value in {**overrides, **placement(tpu)}.items():
        set_dotted(merged, dotted, value, create=True)
    return JobConfig.from_dict(typed(JobConfig, merged))


def write_job_config(model_uri: str, job: JobConfig) -> None:
    """Records the training config beside the checkpoints: later stages rebuild the same model from it."""
    storage.write_text(storage.join(model_uri, JOB_CONFIG_FILE), job.to_json())


def stage_job(model_uri: str, tpu: Mapping[str, Any]) -> JobConfig:
    """The trained model's config placed for this stage (TPU or host CPU)."""
    path = storage.join(model_uri, JOB_CONFIG_FILE)
    require_output(path, "the trained model's job config")
    return JobConfig.from_json(storage.read_text(path)).with_overrides(placement(typed(TPUSettings, tpu)))


def prepare_config(
    data: str, label: str, task: str, key_column: str, eval_fraction: float, options: Mapping[str, Any]
) -> PrepareConfig:
    """The `PrepareConfig` of the prepare stage's parameters ("auto" task and "" key column mean inferred)."""
    fields = {
        **options,
        "data": [resolve_data(data)],
        "label": label,
        "task": None if task == AUTO_TASK else task,
        "key_column": key_column or None,
        "eval_fraction": eval_fraction,
    }
    return PrepareConfig.from_dict(typed(PrepareConfig, fields))


def validation_config(data: Mapping[str, Any]) -> ValidationConfig:
    """The `ValidationConfig` of the prepare stage's `validation_config` parameter ({} for the defaults)."""
    return ValidationConfig.from_dict(typed(ValidationConfig, data))


def model_or_none(resolved: str) -> str | None:
    """A resolved model parameter ("none" or a SavedModel directory) as the library takes it."""
    return None if resolved in ("", NO_MODEL) else resolved


def blessing_config(data: Mapping[str, Any]) -> BlessingConfig:
    """The `BlessingConfig` of the evaluate stage's `blessing_config` parameter ({} for the defaults)."""
    return BlessingConfig.from_dict(typed(BlessingConfig, data))


def write_blessing(blessing_uri: str, verdict: Blessing) -> None:
    """Records the evaluation's verdict in the Blessing artifact, where the export stage reads it."""
    storage.write_text(storage.join(blessing_uri, BLESSING_FILE), verdict.to_json())


def read_blessing(blessing_uri: str) -> Blessing:
    """The verdict the evaluate stage recorded."""
    path = storage.join(blessing_uri, BLESSING_FILE)
    require_output(path, "the evaluation's blessing")
    return Blessing.from_dict(json.loads(storage.read_text(path)))


def copy_summaries_to_tensorboard(source_dir: str, run: str) -> list[str]:
    """Copies the event files in `source_dir` to `$AIP_TENSORBOARD_LOG_DIR/<run>`, where Vertex AI TensorBoard
    uploads from; does nothing outside a custom job with a TensorBoard (the variable is unset)."""
    log_dir = os.environ.get(TENSORBOARD_LOG_DIR_ENV)
    return summaries.copy_event_files(source_dir, storage.join(log_dir, run)) if log_dir else []


def write_publication(publication_uri: str, release: Release, based_on: str) -> None:
    """Records what the release stage did: the published version (or none) and why."""
    record = {
        "published": release.published.to_dict() if release.published else None,
        "reason": release.reason,
        "based_on": based_on,
    }
    storage.write_text(storage.join(publication_uri, PUBLICATION_FILE), json.dumps(record, indent=2, sort_keys=True))
