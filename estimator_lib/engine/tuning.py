"""One tuning trial: train a job on a prepared dataset, then measure it on a validation split.

A trial is judged on a validation split, never on the eval split, which stays unseen until the winner's evaluate
stage blesses it. A built-in family's is prepare's (`valid_fraction`, carved from the training rows); its metrics
have the names and the one computation of the vocabulary (`estimator_lib.vocabulary`,
`evaluation.metrics.reported_metrics`): the trained model's checkpoint (the best by validation loss) predicts every
validation row once, on the host CPU, and "loss" is the validation loss the early-stopping rounds recorded for
that checkpoint (`validation.json`). A user model_fn's records hold none, so `trial_source` carves one from their
train split (`model.user.prepare.carve_validation`) and the trial trains on the rest; its metrics are its
metric_fn's on those records (`engine.user.run.evaluate`), under the user's names.

`report_metric` writes the objective where a Vertex AI hyperparameter tuning trial reports it (the file
`cloudml-hypertune` writes), so a trial on Vertex AI needs no extra package.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Dict, Mapping, Optional

from estimator_lib import storage
from estimator_lib.config import ConfigError, JobConfig
from estimator_lib.data.common import VALID
from estimator_lib.data.prepare import PrepareResult
from estimator_lib.engine.sources import Records, Source
from estimator_lib.engine.user import run as user_run
from estimator_lib.engine.user import stages as user_stages
from estimator_lib.evaluation.evaluate import read_truth
from estimator_lib.evaluation.metrics import reported_metrics, scores_from_rows
from estimator_lib.model.user.prepare import carve_validation
from estimator_lib.predict import batch_predict, read_predictions

LOSS = "loss"
# Where a Vertex AI trial's metric is read from: the file and tag `cloudml-hypertune` uses.
METRIC_FILE_ENV = "CLOUD_ML_HP_METRIC_FILE"
DEFAULT_METRIC_FILE = "/tmp/hypertune/output.metrics"
TRIAL_ID_ENV = "CLOUD_ML_TRIAL_ID"
PROGRESS_SECONDS = 10.0  # training's progress lines (in the trials' log)


@dataclasses.dataclass(frozen=True)
class TrialResult:
    """What one trial measured.

    Attributes:
      metrics: the trained model's metrics on the validation split, by vocabulary name, with "loss".
      global_step: the step of the judged checkpoint.
      trained_steps: the step training reached.
      stopped: why training ended ("patience" or "budget").
    """

    metrics: Dict[str, float]
    global_step: int
    trained_steps: int
    stopped: str


def trial_source(source: Source, work_dir: str) -> Source:
    """The data trials train on and are judged on: a built-in family's rows as prepared, a user's records with a
    validation split carved from their train split into `work_dir` (read back when there already).

    Raises:
      ConfigError: the prepared rows have no validation split (prepare.valid_fraction is 0).
    """
    if isinstance(source, Records):
        return Records(carve_validation(source.prepared, work_dir))
    if not source.prepared.counts.get(VALID):
        raise ConfigError(
            "a trial is judged on the validation split, and the prepared data has no validation rows: set "
            "prepare.valid_fraction above 0 (default 0.1)"
        )
    return source


def run_trial(job: JobConfig, source: Source, trial_dir: str) -> TrialResult:
    """Trains `job` on `source` (a `trial_source`) into `trial_dir`/model and measures it on the validation split."""
    trained = source.train(job, storage.join(trial_dir, "model"), PROGRESS_SECONDS)
    if isinstance(source, Records):
        user, count = user_stages.user_model(job, source.prepared), source.prepared.counts[VALID]
        files = source.prepared.files(VALID)
        measured = user_run.evaluate(job, user, files, trained.model_dir, num_examples=count)
        return TrialResult(measured.metrics, measured.global_step, trained.trained_steps, "budget")
    valid_dir = storage.join(trial_dir, "valid")
    metrics = validation_metrics(job, source.prepared, trained.model_dir, trained.checkpoint, valid_dir)
    metrics[LOSS] = float(trained.validation.best_loss)
    return TrialResult(metrics, trained.global_step, trained.trained_steps, trained.validation.stopped or "")


def validation_metrics(
    job: JobConfig, prepared: PrepareResult, model_dir: str, checkpoint: str, output_dir: str
) -> Dict[str, float]:
    """Every metric of `checkpoint` on the validation rows (`reported_metrics`), from one prediction pass
    written to `output_dir`."""
    files = prepared.files(VALID)
    truth = read_truth(files, prepared.schema)
    batch_predict(
        job, prepared.schema, model_dir, files, output_dir, num_examples=len(truth.keys), checkpoint_path=checkpoint
    )
    return reported_metrics(truth, scores_from_rows(read_predictions(output_dir), truth, "candidate"))


def objective_value(metrics: Mapping[str, float], metric: str) -> float:
    """The objective `metric` of a trial's metrics.

    Raises:
      ConfigError: the trial does not report `metric` (rmse for a classification, a name a user's metric_fn does
        not return), naming those it does.
    """
    if metric not in metrics:
        raise ConfigError(
            f"the search space's metric {metric!r} is not among the trial's metrics (the task's, or your metric_fn's): "
            f"{sorted(metrics)}; set the space file's metric to one of them"
        )
    return float(metrics[metric])


def report_metric(metric: str, value: float, global_step: int, environ: Optional[Mapping[str, str]] = None) -> str:
    """Appends the objective to the file Vertex AI reads a tuning trial's metric from (`cloudml-hypertune`'s
    format: one JSON object per line, the metric's value as text under its tag). Returns the file's path."""
    environ = os.environ if environ is None else environ
    path = environ.get(METRIC_FILE_ENV, DEFAULT_METRIC_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    line = {
        "timestamp": time.time(),
        "trial": str(environ.get(TRIAL_ID_ENV, 0)),
        metric: str(float(value)),
        "global_step": str(int(global_step)),
        "checkpoint_path": "",
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    return path
