"""The evaluate stage: one pass of the candidate over the eval split, its metrics computed once, the blessing.

The candidate predicts the prepared eval split once, from its checkpoint (the best by validation loss), on the TPU
or the CPU: padded to whole batches, padding dropped on the host (`predict.batch_predict`). Its metrics are
computed from those rows' outputs, once, in NumPy (`evaluation.metrics.reported_metrics`): exact, every name with
one definition. No TPUEstimator eval runs here: its metric_fn would report the same names a second time, with
AUCs over 1,000 thresholds.

The labels come from one host read of the eval rows, which also gives the linear reference (`evaluation.reference`,
fitted on the rows the candidate learned from) its inputs. The baseline (the last published model) predicts the
same rows from its exported SavedModel, which parses the `tf.Example`s with its own schema and vocabularies.
`evaluation.metrics` turns all three into metrics in one place, and `evaluation.blessing` decides. The leakage
check's one-feature rules (`evaluation.leakage`) learn from a second host read of the rows the candidate learned
from and are scored on the same eval rows.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from estimator_lib import storage, summaries
from estimator_lib.config import BlessingConfig, BlessingError, JobConfig
from estimator_lib.data.common import TRAIN, VALID
from estimator_lib.data.places import read_places
from estimator_lib.data.prepare import PrepareResult
from estimator_lib.evaluation.blessing import Blessing, decide
from estimator_lib.evaluation.importance import builtin_importance
from estimator_lib.evaluation.intervals import bootstrap_intervals
from estimator_lib.evaluation.leakage import FeatureScore, one_feature_scores
from estimator_lib.evaluation.metrics import (
    Scores,
    Truth,
    blessing_metrics,
    compute_metrics,
    confusion_matrix,
    paired_standard_errors,
    reported_metrics,
    roc_curve,
    scores_from_rows,
)
from estimator_lib.evaluation.reference import DEFAULT_MAX_ROWS, Design, fit_reference, read_design
from estimator_lib.evaluation.slices import optional_table, slices_of_rows, write_summaries
from estimator_lib.evaluation.worst import worst_rows
from estimator_lib.export import read_export_metadata
from estimator_lib.model import checkpoints
from estimator_lib.predict import batch_predict, predict_from_saved_model, read_predictions
from estimator_lib.predict.origins import prepared_origins
from estimator_lib.predict.predicted import eval_profile
from estimator_lib.schema import CLASSIFICATION, REGRESSION, Schema


# -- the evaluate stage --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What the evaluate stage reports.

    Attributes:
      metrics: every metric of the candidate on the eval rows (`metrics.reported_metrics`, exact, padding never
        counted), computed once from its one prediction pass; `blessing.candidate_metrics` is the part the
        blessing compares, the same values.
      global_step, checkpoint: the evaluated checkpoint.
      blessing: the verdict, with the blessing metrics of the candidate (and the baseline).
      classes: class names (classification), the order of the confusion matrix.
      confusion_matrix: [true][predicted] counts (None for regression).
      roc: {"fpr", "tpr", "thresholds"} (None for regression).
      truth: the eval rows' keys and labels.
      candidate: the candidate's scores for those rows (what the report plots).
      baseline: the baseline's scores for the same rows, when there is a baseline.
      importance: feature importance on a sample of the eval rows (`evaluation.importance`): {"metric",
        "higher_is_better", "rows", "repeats", "permutation": [{"feature", "importance", "std"}] most important
        first, "attributions": None or {"method": "integrated_gradients", "output", "steps", "features":
        [{"feature", "attribution"}], ...}}; None when `blessing.importance_rows` is None.
      slices: each slice's rows and metrics, judged or not (`evaluation.slices.slice_table`); None when
        `blessing.slices` names none.
      intervals: bootstrap confidence intervals of the candidate's headline metrics and of its paired difference
        with the baseline (`intervals.bootstrap_intervals`); None for a user model (no per-row outputs).
      worst_rows: the eval rows of highest loss, with their input file and line and original values
        (`worst.worst_rows`); None for a user model (no per-row outputs).
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
    slices: Optional[Mapping[str, Any]] = None
    intervals: Optional[Mapping[str, Any]] = None
    importance: Optional[Mapping[str, Any]] = None
    worst_rows: Optional[Sequence[Mapping[str, Any]]] = None


def read_eval_rows(files: Union[str, Sequence[str]], schema: Schema) -> Tuple[Truth, Design]:
    """Reads prepared eval TFRecords once (host CPU): the rows' keys and labels, and the linear reference's
    inputs for the same rows in the same order."""
    keys, design, labels = read_design(schema, [files])
    if len(set(keys)) != len(keys):
        raise BlessingError("the eval rows' keys are not unique; predictions cannot be matched to labels")
    if schema.label.task == CLASSIFICATION:
        classes = schema.label.classes
        return Truth(tuple(keys), np.array([classes[i] for i in labels], dtype=object), classes), design
    return Truth(tuple(keys), np.asarray(labels, dtype=np.float64)), design


def read_truth(files: Union[str, Sequence[str]], schema: Schema) -> Truth:
    """Keys and labels of prepared eval TFRecords (host CPU, one pass)."""
    return read_eval_rows(files, schema)[0]


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

    Steps: (1) the eval rows' labels, and the reference's inputs, from one host read; (2) the candidate's
    predictions for the eval rows from its checkpoint (the best by validation loss): its one pass over the
    split; (3) the linear reference, fitted on the train and validation splits, and its predictions for the same
    rows; (4) each feature's one-feature rule (the leakage check), learned on the same rows and scored on the eval
    rows; (5) the baseline's predictions for the same rows from its SavedModel, with its own schema and
    vocabularies; (6) the metrics of all of them, each computed once (`reported_metrics`), the bootstrap
    intervals of the candidate's and of its paired difference with the baseline (`intervals`), and the candidate's
    on each slice `config.slices` names (their original values read with the labels); (7) the verdict; the
    slices' metrics also go to TensorBoard, beside the evaluations' (`MODEL_DIR/eval`).

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
    config.check_allowed_leakage([f.name for f in schema.features])
    config.check_slice_features([f.name for f in schema.features])
    baseline_schema = _baseline_schema(baseline_dir, schema) if baseline_dir else None  # fail before any work
    eval_files, count = prepared.files("eval"), prepared.counts.get("eval", 0)
    if not count:
        raise ValueError(
            f"the eval split {eval_files!r} holds no row; evaluation needs at least one: prepare more rows or a larger "
            "eval_fraction"
        )
    checkpoint = _checkpoint(model_dir)
    truth, design = read_eval_rows(eval_files, schema)
    sets = slices_of_rows(schema, [eval_files], truth.keys, config) if config.slices else None
    origins = prepared_origins(prepared.output_dir, prepared.manifest, schema.key_column is not None)
    candidate = _score_checkpoint(
        job, schema, model_dir, checkpoint, eval_files, count, storage.join(work_dir, "candidate"), truth, origins
    )
    reference = fit_reference(schema, *_learned_rows(prepared))
    reference_scores = reference.predict(design)  # the rows of `truth`, in its order
    leakage = _one_feature_scores(job, prepared, config, truth, design)
    baseline, baseline_metrics = None, None
    if baseline_dir:
        baseline = _score_saved_model(
            baseline_dir, baseline_schema, eval_files, storage.join(work_dir, "baseline"), truth, origins
        )
        baseline_metrics = compute_metrics(truth, baseline)
    metrics = reported_metrics(truth, candidate)
    overall = blessing_metrics(metrics, truth.task)
    slices = optional_table(config, truth, candidate, sets, overall, config.comparison_for(truth.task))
    intervals = bootstrap_intervals(config, truth, candidate, overall, baseline, baseline_metrics)
    blessing = decide(
        config,
        truth,
        overall,
        baseline_metrics,
        baseline_dir,
        compute_metrics(truth, reference_scores),
        reference.description,
        paired_standard_errors(truth, candidate, reference_scores),
        leakage,
        slices=slices,
        baseline_interval=intervals["baseline"],
    )
    blessing = dataclasses.replace(blessing, eval_predictions=eval_profile(schema, candidate.predicted).to_dict())
    importance = builtin_importance(job, schema, model_dir, checkpoint, eval_files, count, config)
    step = int(tf.train.load_variable(checkpoint, tf.compat.v1.GraphKeys.GLOBAL_STEP))
    write_summaries(storage.join(model_dir, summaries.EVAL_DIR), step, metrics, slices)
    scores = {"truth": truth, "candidate": candidate, "baseline": baseline}
    scores.update(slices=slices, intervals=intervals, importance=importance)
    scores["worst_rows"] = _worst_rows(prepared, truth, candidate)
    if truth.task == REGRESSION:
        return Evaluation(metrics, step, checkpoint, blessing, **scores)
    return Evaluation(
        metrics,
        step,
        checkpoint,
        blessing,
        truth.classes,
        confusion_matrix(truth, candidate),
        roc_curve(truth, candidate),
        **scores,
    )


def _checkpoint(model_dir: str) -> str:
    """The model's checkpoint (`checkpoints.selected_checkpoint`: the best by validation loss, else the newest)."""
    checkpoint = checkpoints.selected_checkpoint(model_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint in {model_dir!r} to evaluate; train first")
    return checkpoint


def _worst_rows(prepared: "PrepareResult", truth: Truth, candidate: Scores) -> List[Dict[str, Any]]:
    """The worst-predicted eval rows, placed in the input by the prepared dataset's eval places (`places`)."""
    names = [described["name"] for described in prepared.manifest.get("inputs", [])]
    places = read_places(prepared.output_dir)
    return worst_rows(truth, candidate, prepared.schema, prepared.files("eval"), places, names)


def _learned_rows(prepared: "PrepareResult") -> Tuple[List[str], int]:
    """The file patterns and row count of the splits the candidate learned from: train, and valid if any."""
    splits = [s for s in (TRAIN, VALID) if prepared.counts.get(s)]
    return [prepared.files(s) for s in splits], sum(prepared.counts[s] for s in splits)


def _one_feature_scores(
    job: "JobConfig", prepared: "PrepareResult", config: BlessingConfig, truth: Truth, design: Design
) -> Optional[Tuple[FeatureScore, ...]]:
    """Each feature the model reads, alone: its rule learned on the rows the candidate learned from (every k-th
    row beyond `DEFAULT_MAX_ROWS`, as the reference's), scored on the eval rows (`design`, in `truth`'s order).
    Host CPU. None when `leakage_threshold` is None: no check, no read."""
    if config.leakage_threshold is None:
        return None
    schema = prepared.schema
    files, count = _learned_rows(prepared)
    _, learned, labels = read_design(schema, files, max(1, math.ceil(count / DEFAULT_MAX_ROWS)))
    features = [f.name for f in schema.select(job.model.features).features]
    return one_feature_scores(schema, learned, labels, truth, design, features)


def _score_checkpoint(job, schema, model_dir, checkpoint, files, count, output_dir, truth, origins) -> Scores:
    """The candidate's predictions for the eval rows, from the evaluated checkpoint (TPU or CPU): its one pass
    (the rows placed by key, `origins`, so no pass counts them per file)."""
    batch_predict(
        job, schema, model_dir, files, output_dir, num_examples=count, checkpoint_path=checkpoint, origins=origins
    )
    return scores_from_rows(read_predictions(output_dir), truth, "candidate")


def _score_saved_model(export_dir, schema, files, output_dir, truth, origins) -> Scores:
    """The baseline's predictions for the same rows, from its SavedModel's CPU graph and its own schema."""
    predict_from_saved_model(export_dir, schema, files, output_dir, num_examples=len(truth.keys), origins=origins)
    return scores_from_rows(read_predictions(output_dir), truth, "baseline")
