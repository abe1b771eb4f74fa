"""The evaluate stage: eval metrics from the model's own metric_fn, then the blessing.

The candidate is scored on the prepared eval split from its checkpoint (the best by validation loss), the
baseline (the last published model) from its exported SavedModel, which parses the same `tf.Example`s with its
own schema and vocabularies, and the linear reference (`evaluation.reference`) is fitted on the rows the
candidate learned from and scored on the same eval rows; `evaluation.metrics` turns all three into metrics in one
place, and `evaluation.blessing` decides.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from estimator_lib import estimator, storage
from estimator_lib.config import BlessingConfig, BlessingError, JobConfig
from estimator_lib.data.common import TRAIN, VALID
from estimator_lib.data.prepare import PrepareResult
from estimator_lib.evaluation.blessing import Blessing, decide
from estimator_lib.evaluation.metrics import (
    Scores,
    Truth,
    compute_metrics,
    confusion_matrix,
    paired_standard_errors,
    roc_curve,
    scores_from_rows,
)
from estimator_lib.evaluation.reference import fit_reference
from estimator_lib.export import read_export_metadata
from estimator_lib.model import transform
from estimator_lib.model.inputs import resolve_files
from estimator_lib.predict import batch_predict, predict_from_saved_model, read_predictions
from estimator_lib.schema import CLASSIFICATION, KEY_FEATURE, LABEL_KEY, REGRESSION, Schema


# -- the evaluate stage --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What the evaluate stage reports.

    Attributes:
      metrics: the estimator's eval-split metrics (`estimator.evaluate`: the model's own metric_fn, padding
        weighted out, run where the model runs: TPU or CPU).
      global_step, checkpoint: the evaluated checkpoint.
      blessing: the verdict, with the blessing metrics of the candidate (and the baseline).
      classes: class names (classification), the order of the confusion matrix.
      confusion_matrix: [true][predicted] counts (None for regression).
      roc: {"fpr", "tpr", "thresholds"} (None for regression).
      truth: the eval rows' keys and labels.
      candidate: the candidate's scores for those rows (what the report plots).
      baseline: the baseline's scores for the same rows, when there is a baseline.
    """

    metrics: Dict[str, float]
    global_step: int
    checkpoint: str
    blessing: Blessing
    classes: Tuple[str, ...] = ()
    confusion_matrix: Optional[List[List[int]]] = None
    roc: Optional[Dict[str, List[float]]] = None
    truth: Optional[Truth] = None
    candidate: Optional[Scores] = None
    baseline: Optional[Scores] = None


def read_truth(files: Union[str, Sequence[str]], schema: Schema) -> Truth:
    """Reads keys and labels of prepared eval TFRecords (host CPU, one pass)."""
    parse_spec = transform.parse_spec(schema)
    spec = {KEY_FEATURE: parse_spec[KEY_FEATURE], LABEL_KEY: parse_spec[LABEL_KEY]}
    keys: List[str] = []
    labels: List[Any] = []
    for batch in tf.data.TFRecordDataset(resolve_files(files)).batch(1024).map(lambda s: tf.io.parse_example(s, spec)):
        keys.extend(k.decode("utf-8") for k in batch[KEY_FEATURE].numpy())
        labels.extend(batch[LABEL_KEY].numpy().tolist())
    if len(set(keys)) != len(keys):
        raise BlessingError("the eval rows' keys are not unique; predictions cannot be matched to labels")
    if schema.label.task == CLASSIFICATION:
        classes = schema.label.classes
        return Truth(tuple(keys), np.array([classes[i] for i in labels], dtype=object), classes)
    return Truth(tuple(keys), np.array(labels, dtype=np.float64))


def _baseline_schema(baseline_dir: str, schema: Schema) -> Schema:
    """The schema the baseline was exported with; its label must be the candidate's."""
    baseline = Schema.from_dict(read_export_metadata(baseline_dir)["schema"])
    if (baseline.label.name, baseline.label.task) != (schema.label.name, schema.label.task):
        raise BlessingError(
            f"the baseline {baseline_dir!r} predicts {baseline.label.task} label {baseline.label.name!r}, the "
            f"candidate {schema.label.task} label {schema.label.name!r}; compare models of the same label "
            "(or pass baseline='none')"
        )
    return baseline


def evaluate_and_bless(
    job: "JobConfig",
    prepared: "PrepareResult",
    model_dir: str,
    config: BlessingConfig,
    baseline_dir: Optional[str],
    work_dir: str,
) -> Evaluation:
    """Evaluates a trained model on the eval split and decides whether it may be published.

    Steps: (1) the estimator's metrics on the eval split, from the model's checkpoint (the best by validation
    loss); (2) the candidate's predictions for the eval rows from the same checkpoint; (3) the linear reference,
    fitted on the train and validation splits, and its predictions for the same rows; (4) the baseline's
    predictions for the same rows from its SavedModel, with its own schema and vocabularies; (5) blessing
    metrics of all of them from `compute_metrics`; (6) the verdict.

    Args:
      job: the `JobConfig` the model was trained with, placed for this stage.
      prepared: the `PrepareResult` of the dataset (schema, eval files, counts).
      model_dir: the estimator's model directory.
      config: when to bless.
      baseline_dir: the baseline's SavedModel directory (the last published model), or None.
      work_dir: where both models' predictions are written (candidate/, baseline/).
    """
    schema = prepared.schema
    config.check_task(schema.label.task)
    baseline_schema = _baseline_schema(baseline_dir, schema) if baseline_dir else None  # fail before any work
    eval_files, count = prepared.files("eval"), prepared.counts["eval"]
    result = estimator.evaluate(job, schema, eval_files, model_dir, num_examples=count)
    truth = read_truth(eval_files, schema)
    candidate = _score_checkpoint(
        job,
        schema,
        model_dir,
        result.checkpoint,
        eval_files,
        count,
        storage.join(work_dir, "candidate"),
        truth,
    )
    reference = fit_reference(schema, *_learned_rows(prepared))
    reference_scores = reference.scores(eval_files, truth)
    reference_metrics = compute_metrics(truth, reference_scores)
    baseline, baseline_metrics = None, None
    if baseline_dir:
        baseline = _score_saved_model(
            baseline_dir, baseline_schema, eval_files, storage.join(work_dir, "baseline"), truth
        )
        baseline_metrics = compute_metrics(truth, baseline)
    candidate_metrics = compute_metrics(truth, candidate)
    errors = paired_standard_errors(truth, candidate, reference_scores)
    blessing = decide(
        config,
        truth,
        candidate_metrics,
        baseline_metrics,
        baseline_dir,
        reference_metrics,
        reference.description,
        errors,
    )
    scores = {"truth": truth, "candidate": candidate, "baseline": baseline}
    if truth.task == REGRESSION:
        return Evaluation(result.metrics, result.global_step, result.checkpoint, blessing, **scores)
    return Evaluation(
        result.metrics,
        result.global_step,
        result.checkpoint,
        blessing,
        truth.classes,
        confusion_matrix(truth, candidate),
        roc_curve(truth, candidate),
        **scores,
    )


def _learned_rows(prepared: "PrepareResult") -> Tuple[List[str], int]:
    """The file patterns and row count of the splits the candidate learned from: train, and valid if any."""
    splits = [s for s in (TRAIN, VALID) if prepared.counts.get(s)]
    return [prepared.files(s) for s in splits], sum(prepared.counts[s] for s in splits)


def _score_checkpoint(job, schema, model_dir, checkpoint, files, count, output_dir, truth) -> Scores:
    """The candidate's predictions for the eval rows, from the evaluated checkpoint (TPU or CPU)."""
    batch_predict(job, schema, model_dir, files, output_dir, num_examples=count, checkpoint_path=checkpoint)
    return scores_from_rows(read_predictions(output_dir), truth, "candidate")


def _score_saved_model(export_dir, schema, files, output_dir, truth) -> Scores:
    """The baseline's predictions for the same rows, from its SavedModel's CPU graph and its own schema."""
    predict_from_saved_model(export_dir, schema, files, output_dir, num_examples=len(truth.keys))
    return scores_from_rows(read_predictions(output_dir), truth, "baseline")
