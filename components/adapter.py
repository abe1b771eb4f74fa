"""The components' adapter: KFP parameters and artifact URIs in, the typed `estimator_lib` configs out.

Each stage gets its spec (`estimator_lib.config.stages`, cut from the run's resolved `RunConfig`) as JSON text
in one string parameter, and its placement (TPU or CPU) as another: KFP's dict parameters travel as protobuf
Structs, whose numbers are all floats, while JSON text decoded by the spec's types keeps ints as ints. This
module decodes them (`decode_spec`, `placement`) without merging anything into them, records the training
config beside the checkpoints (later stages rebuild the same model from it), writes and reads the evaluation's
verdict, writes the release's record, and refuses to go on when a file an earlier stage must have written is
missing. It holds no ML logic; `components.artifacts` describes the outputs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from typing import Any, TypeVar

from components.records import CONSOLE_TTY_ENV, JOB_CONFIG_FILE, PROGRESS_SECONDS
from components.registry import BLESSING_FILE, PUBLICATION_FILE
from estimator_lib import storage, summaries
from estimator_lib.config import ConfigError, JobConfig, JsonConfig, PrepareConfig, TPUSettings
from estimator_lib.config.base import check_value
from estimator_lib.config.run import NO_MODEL
from estimator_lib.config.stages import PrepareSpec, TrainSpec
from estimator_lib.data.embedded import resolve_data
from estimator_lib.evaluation import Blessing
from estimator_lib.predict.predicted import PredictionProfile
from estimator_lib.release import Release

# Set by Vertex AI in a custom job that has a TensorBoard: the directory its uploader reads.
TENSORBOARD_LOG_DIR_ENV = "AIP_TENSORBOARD_LOG_DIR"
Spec = TypeVar("Spec", bound=JsonConfig)


class OutputMissingError(RuntimeError):
    """A stage finished but its output is not where it must be."""


def require_output(uri: str, what: str) -> None:
    """Raises `OutputMissingError` naming `what` unless `uri` exists."""
    if not storage.exists(uri):
        raise OutputMissingError(f"{what} was not written: {uri} does not exist; the stage failed silently")


def decode_spec(cls: type[Spec], text: str) -> Spec:
    """The stage spec `text` holds (`RunConfig.stage_specs()`, sent as JSON text), every value checked against
    the spec's declared types: the one way a stage reads what it is given."""
    return cls.from_json(text)


def placement(text: str) -> dict[str, Any]:
    """'{"use_tpu": true, "num_cores": 8}' -> {"tpu.use_tpu": True, "tpu.num_cores": 8}: where the pipeline
    placed this stage, as job config overrides, each value checked against `TPUSettings`' types."""
    given = json.loads(text)
    hints = typing.get_type_hints(TPUSettings)
    unknown = sorted(set(given) - set(hints))
    if unknown:
        raise ConfigError(f"the stage's placement names {unknown}, which are not TPUSettings fields")
    return {f"tpu.{key}": check_value(hints[key], value, f"tpu.{key}") for key, value in given.items()}


def training_job(spec: TrainSpec, tpu: str, warm_start_from: str | None = None) -> JobConfig:
    """The job config for training: the spec's, with the resolved warm-start source (None keeps the spec's)
    and the stage's placement (`placement`)."""
    overrides = placement(tpu)
    if warm_start_from is not None:
        overrides["training.warm_start_from"] = warm_start_from
    return spec.job.with_overrides(overrides)


def write_job_config(model_uri: str, job: JobConfig) -> None:
    """Records the training config beside the checkpoints: later stages rebuild the same model from it."""
    storage.write_text(storage.join(model_uri, JOB_CONFIG_FILE), job.to_json())


def stage_job(model_uri: str, tpu: str) -> JobConfig:
    """The trained model's config placed for this stage (TPU or host CPU; `placement`)."""
    path = storage.join(model_uri, JOB_CONFIG_FILE)
    require_output(path, "the trained model's job config")
    return JobConfig.from_json(storage.read_text(path)).with_overrides(placement(tpu))


def prepare_config(spec: PrepareSpec) -> PrepareConfig:
    """The spec's `PrepareConfig` with its data located ("embedded:penguins" -> the shipped file)."""
    return dataclasses.replace(spec.prepare, data=tuple(resolve_data(d) for d in spec.prepare.data))


def model_or_none(resolved: str) -> str | None:
    """A resolved model parameter ("none" or a SavedModel directory) as the library takes it."""
    return None if resolved in ("", NO_MODEL) else resolved


def write_blessing(blessing_uri: str, verdict: Blessing) -> None:
    """Records the evaluation's verdict in the Blessing artifact, where the export stage reads it."""
    storage.write_text(storage.join(blessing_uri, BLESSING_FILE), verdict.to_json())


def read_blessing(blessing_uri: str) -> Blessing:
    """The verdict the evaluate stage recorded."""
    path = storage.join(blessing_uri, BLESSING_FILE)
    require_output(path, "the evaluation's blessing")
    return Blessing.from_dict(json.loads(storage.read_text(path)))


def eval_predictions_parameter(blessing_uri: str) -> str:
    """What the candidate predicted for the eval rows (`Blessing.eval_predictions`), as the evaluate stage hands it
    to batch prediction: a parameter, so that batch prediction stays cached when it did not change
    (`PredictionProfile.to_parameter`); "" when the evaluation recorded none (a user's model_fn)."""
    recorded = read_blessing(blessing_uri).eval_predictions
    return PredictionProfile.from_dict(recorded).to_parameter() if recorded is not None else ""


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


def progress_seconds() -> float:
    """The cadence of a stage's progress lines: often when the local runner's console is a terminal (it sets
    `CONSOLE_TTY_ENV`; the stage's own output is a pipe), else a steady cadence for logs."""
    return PROGRESS_SECONDS[os.environ.get(CONSOLE_TTY_ENV) == "1"]
