"""One tuning trial: train a job on a prepared dataset, then measure it on the validation split.

A trial is judged on the validation split (prepare's `valid_fraction`, carved from the training rows), never on
the eval split, which stays unseen until the winner's evaluate stage blesses it. The metrics have the names and
the one computation of the vocabulary (`estimator_lib.vocabulary`, `evaluation.metrics.reported_metrics`): the
trained model's checkpoint (the best by validation loss) predicts every validation row once, on the host CPU,
and "loss" is the validation loss the early-stopping rounds recorded for that checkpoint (`validation.json`).

`report_metric` writes the objective where a Vertex AI hyperparameter tuning trial reports it (the file
`cloudml-hypertune` writes), so a trial on Vertex AI needs no extra package.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Dict, Mapping, Optional

from estimator_lib import estimator, storage
from estimator_lib.config import ConfigError, JobConfig
from estimator_lib.data.common import VALID
from estimator_lib.data.prepare import PrepareResult
from estimator_lib.evaluation.evaluate import read_truth
from estimator_lib.evaluation.metrics import reported_metrics, scores_from_rows
from estimator_lib.predict import batch_predict, read_predictions

LOSS = "loss"
# Where a Vertex AI trial's metric is read from: the file and tag `cloudml-hypertune` uses.
METRIC_FILE_ENV = "CLOUD_ML_HP_METRIC_FILE"
DEFAULT_METRIC_FILE = "/tmp/hypertune/output.metrics"
TRIAL_ID_ENV = "CLOUD_ML_TRIAL_ID"


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


def run_trial(job: JobConfig, prepared: PrepareResult, trial_dir: str) -> TrialResult:
    """Trains `job` on `prepared` into `trial_dir`/model and measures it on the validation split.

    Raises:
      ConfigError: the prepared dataset has no validation rows (prepare.valid_fraction is 0).
    """
    if not prepared.counts.get(VALID):
        raise ConfigError(
            "a trial is judged on the validation split, and the prepared data has no validation rows: set "
            "prepare.valid_fraction above 0 (default 0.1)"
        )
    result = estimator.train_prepared(job, prepared, storage.join(trial_dir, "model"))
    metrics = validation_metrics(job, prepared, result.model_dir, result.checkpoint, storage.join(trial_dir, "valid"))
    metrics[LOSS] = float(result.validation.best_loss)
    return TrialResult(metrics, result.global_step, result.trained_steps, result.validation.stopped or "")


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
      ConfigError: the trial's task does not report `metric` (e.g. rmse for a classification), naming those it does.
    """
    if metric not in metrics:
        raise ConfigError(
            f"the search space's metric {metric!r} is not reported for this task; use one of {sorted(metrics)}"
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
