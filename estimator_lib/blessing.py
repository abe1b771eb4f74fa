"""Blessing: is a newly trained model good enough to publish?

A candidate is blessed when every check passes:
  * it beats the trivial model (always the most frequent class; always the mean label), unless turned off;
  * each user threshold holds (`{"accuracy": 0.9}` is a floor, `{"rmse": 3.5}` a ceiling: the direction is the
    metric's own);
  * when a baseline is given (the last published model), the candidate improves on it by at least
    `min_improvement` on the comparison metric (negative tolerates a drop of that size).

Fairness: the candidate and the baseline are compared with the same metric code on the same rows. Both are
scored on the prepared eval split (the candidate from its checkpoint, the baseline from its exported SavedModel,
which parses the same `tf.Example`s with its own schema and vocabularies), and `compute_metrics` turns each
set of predictions into metrics in one place. Classes are matched by name, not by index, so a baseline trained
when the label had other classes, or listed them in another order, is still scored correctly: a class it never
knew gets probability 0.

Everything here runs on the host CPU (NumPy); the scoring runs through `estimator_lib.predict`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from estimator_lib.schema import CLASSIFICATION, KEY_FEATURE, LABEL_KEY, REGRESSION, Schema

if TYPE_CHECKING:
    from estimator_lib.config import JobConfig
    from estimator_lib.prepare import PrepareResult

HIGHER_IS_BETTER = ("accuracy", "auc", "r2")
LOWER_IS_BETTER = ("log_loss", "rmse", "mae")
TASK_METRICS = {CLASSIFICATION: ("accuracy", "log_loss", "auc"), REGRESSION: ("rmse", "mae", "r2")}
DEFAULT_COMPARISON = {CLASSIFICATION: "accuracy", REGRESSION: "rmse"}
ROC_POINTS = 101
_EPSILON = 1e-15


class BlessingError(ValueError):
    """The blessing configuration does not fit the task, or predictions do not cover the eval rows."""


def higher_is_better(metric: str) -> bool:
    if metric in HIGHER_IS_BETTER:
        return True
    if metric in LOWER_IS_BETTER:
        return False
    raise BlessingError(f"unknown blessing metric {metric!r}; use one of {sorted(HIGHER_IS_BETTER + LOWER_IS_BETTER)}")


@dataclasses.dataclass(frozen=True)
class BlessingConfig:
    """When a candidate is blessed.

    Attributes:
      thresholds: {metric: worst acceptable value}; a floor for accuracy/auc/r2, a ceiling for
        log_loss/rmse/mae. Classification metrics: accuracy, log_loss, auc (one-vs-rest macro average for
        more than two classes); regression: rmse, mae, r2.
      beat_trivial: require the candidate to beat the trivial model (accuracy above the most frequent
        class's share; r2 above 0, i.e. better than always predicting the mean).
      comparison_metric: the metric compared with the baseline; None picks accuracy (classification) or rmse
        (regression).
      min_improvement: how much better than the baseline the candidate must be on the comparison metric, in the
        metric's units and direction (0.01 = one accuracy point better; -0.01 tolerates one point worse).
    """

    thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    beat_trivial: bool = True
    comparison_metric: Optional[str] = None
    min_improvement: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.thresholds, Mapping):
            raise BlessingError(f"blessing thresholds must be a JSON object {{metric: value}}, got {self.thresholds!r}")
        object.__setattr__(self, "thresholds", dict(self.thresholds))
        for name, value in self.thresholds.items():
            higher_is_better(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise BlessingError(f"blessing threshold {name}={value!r} must be a finite number")
        if self.comparison_metric is not None:
            higher_is_better(self.comparison_metric)
        if not isinstance(self.min_improvement, (int, float)) or not math.isfinite(self.min_improvement):
            raise BlessingError(f"min_improvement={self.min_improvement!r} must be a finite number, e.g. 0.0")

    def check_task(self, task: str) -> None:
        """Raises when a metric named here does not exist for `task`."""
        allowed = TASK_METRICS[task]
        named = list(self.thresholds) + ([self.comparison_metric] if self.comparison_metric else [])
        wrong = sorted(m for m in named if m not in allowed)
        if wrong:
            raise BlessingError(f"blessing metric(s) {wrong} do not apply to a {task} label; use {list(allowed)}")

    def comparison_for(self, task: str) -> str:
        return self.comparison_metric or DEFAULT_COMPARISON[task]

    def to_dict(self) -> Dict[str, Any]:
        return {**dataclasses.asdict(self), "thresholds": dict(self.thresholds)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BlessingConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BlessingError(f"unknown blessing field(s) {unknown}; known: {sorted(known)}")
        return cls(**data)


# -- truth and predictions -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Truth:
    """The eval rows' keys and labels: class names (classification) or float values (regression)."""

    keys: Tuple[str, ...]
    labels: np.ndarray
    classes: Tuple[str, ...] = ()

    @property
    def task(self) -> str:
        return CLASSIFICATION if self.classes else REGRESSION

    @property
    def label_index(self) -> np.ndarray:
        """int [N]: each label's position in `classes` (classification only)."""
        return np.array([self.classes.index(c) for c in self.labels])


@dataclasses.dataclass(frozen=True)
class Scores:
    """One model's predictions for the eval rows, in `Truth.keys` order.

    Attributes:
      predicted: class names (classification) or float values (regression), [N].
      probabilities: float [N, K] over `Truth.classes` (classification; classes the model does not know get 0).
    """

    predicted: np.ndarray
    probabilities: Optional[np.ndarray] = None


def read_truth(files: Union[str, Sequence[str]], schema: Schema) -> Truth:
    """Reads keys and labels of prepared eval TFRecords (host CPU, one pass)."""
    import tensorflow as tf

    from estimator_lib.inputs import resolve_files

    parse_spec = schema.parse_spec()
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


def scores_from_rows(rows: Sequence[Mapping[str, Any]], truth: Truth, who: str) -> Scores:
    """Aligns prediction rows ({"key", "class", "probabilities": {class: p}} or {"key", "value"}) with `truth`."""
    by_key = {str(r["key"]): r for r in rows}
    missing = [k for k in truth.keys if k not in by_key]
    if missing:
        raise BlessingError(
            f"the {who} predictions miss {len(missing)} of {len(truth.keys)} eval rows (e.g. key {missing[0]!r}); "
            "both models must score the same rows"
        )
    ordered = [by_key[k] for k in truth.keys]
    if truth.task == REGRESSION:
        return Scores(np.array([float(r["value"]) for r in ordered], dtype=np.float64))
    index = {c: i for i, c in enumerate(truth.classes)}
    probabilities = np.zeros((len(ordered), len(truth.classes)))
    for n, row in enumerate(ordered):
        for cls, p in row["probabilities"].items():
            if cls in index:
                probabilities[n, index[cls]] = float(p)
    return Scores(np.array([str(r["class"]) for r in ordered], dtype=object), probabilities)


# -- metrics, in one place for every model -------------------------------------------------------------------
def auc(positive: np.ndarray, score: np.ndarray) -> float:
    """Exact ROC AUC (Mann-Whitney, ties count half); NaN when a side is empty. positive bool [N], score [N]."""
    pos, neg = score[positive], score[~positive]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    _, group, counts = np.unique(np.concatenate([pos, neg]), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[group]  # 1-based ranks, averaged over ties
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def compute_metrics(truth: Truth, scores: Scores) -> Dict[str, float]:
    """Blessing metrics of one model's scores: accuracy, log_loss, auc or rmse, mae, r2."""
    if truth.task == REGRESSION:
        error = scores.predicted - truth.labels
        total = float(np.sum((truth.labels - truth.labels.mean()) ** 2))
        r2 = 1.0 - float(np.sum(error**2)) / total if total > 0 else float("nan")
        return {"rmse": float(np.sqrt(np.mean(error**2))), "mae": float(np.mean(np.abs(error))), "r2": r2}
    label_index = truth.label_index
    p_true = scores.probabilities[np.arange(len(label_index)), label_index]
    if len(truth.classes) == 2:
        area = auc(label_index == 1, scores.probabilities[:, 1])
    else:
        per_class = [auc(label_index == k, scores.probabilities[:, k]) for k in range(len(truth.classes))]
        defined = [a for a in per_class if not math.isnan(a)]
        area = float(np.mean(defined)) if defined else float("nan")
    return {
        "accuracy": float(np.mean(scores.predicted == truth.labels)),
        "log_loss": float(np.mean(-np.log(np.clip(p_true, _EPSILON, 1.0)))),
        "auc": area,
    }


def trivial_metrics(truth: Truth) -> Dict[str, float]:
    """What the trivial model scores: the most frequent class's share; r2 = 0 for the mean."""
    if truth.task == REGRESSION:
        return {"r2": 0.0}
    _, counts = np.unique(truth.labels.astype(str), return_counts=True)
    return {"accuracy": float(counts.max() / counts.sum())}


def confusion_matrix(truth: Truth, scores: Scores) -> List[List[int]]:
    """Counts [true class][predicted class] over `truth.classes` (predictions of unknown classes dropped)."""
    k = len(truth.classes)
    matrix = np.zeros((k, k), dtype=np.int64)
    index = {c: i for i, c in enumerate(truth.classes)}
    for label, predicted in zip(truth.labels, scores.predicted):
        if predicted in index:
            matrix[index[label], index[predicted]] += 1
    return matrix.tolist()


def roc_curve(truth: Truth, scores: Scores, points: int = ROC_POINTS) -> Dict[str, List[float]]:
    """ROC points at `points` evenly spaced thresholds from 1 to 0.

    Binary: the second class (index 1) is positive. More classes: the micro-average of one-vs-rest curves
    (every (row, class) pair is one decision).
    """
    label_index = truth.label_index
    if len(truth.classes) == 2:
        positive, score = label_index == 1, scores.probabilities[:, 1]
    else:
        positive = (label_index[:, None] == np.arange(len(truth.classes))[None, :]).ravel()
        score = scores.probabilities.ravel()
    thresholds = np.linspace(1.0, 0.0, points)
    n_pos, n_neg = max(int(positive.sum()), 1), max(int((~positive).sum()), 1)
    tpr = [float(np.sum(positive & (score >= t)) / n_pos) for t in thresholds]
    fpr = [float(np.sum(~positive & (score >= t)) / n_neg) for t in thresholds]
    return {"fpr": fpr, "tpr": tpr, "thresholds": thresholds.tolist()}


# -- the decision --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Check:
    """One blessing check: `value` compared with `bound` in the metric's direction."""

    name: str
    metric: str
    value: float
    bound: float
    passed: bool
    message: str


def _check(name: str, metric: str, value: float, bound: float, strict: bool, what: str) -> Check:
    higher = higher_is_better(metric)
    if math.isnan(value):
        passed = False
    elif higher:
        passed = value > bound if strict else value >= bound
    else:
        passed = value < bound if strict else value <= bound
    relation = (">" if strict else ">=") if higher else ("<" if strict else "<=")
    verdict = "holds" if passed else "fails"
    return Check(name, metric, value, bound, passed, f"{what}: {metric}={value:.4f} {relation} {bound:.4f} {verdict}")


@dataclasses.dataclass(frozen=True)
class Blessing:
    """The verdict and its evidence (what the export stage reads to decide whether to publish)."""

    blessed: bool
    checks: Tuple[Check, ...]
    candidate_metrics: Mapping[str, float]
    comparison_metric: str
    num_examples: int
    baseline_uri: Optional[str] = None
    baseline_metrics: Optional[Mapping[str, float]] = None

    @property
    def reasons(self) -> Tuple[str, ...]:
        """Why the candidate was not blessed (the failed checks), empty when it was."""
        return tuple(c.message for c in self.checks if not c.passed)

    def summary(self) -> str:
        if self.blessed:
            return f"blessed: all {len(self.checks)} check(s) hold"
        return "not blessed: " + "; ".join(self.reasons)

    def to_dict(self) -> Dict[str, Any]:
        out = dataclasses.asdict(self)
        out["checks"] = [dataclasses.asdict(c) for c in self.checks]
        out["reasons"] = list(self.reasons)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Blessing":
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in fields}
        kwargs["checks"] = tuple(Check(**c) for c in data["checks"])
        return cls(**kwargs)


def decide(
    config: BlessingConfig,
    truth: Truth,
    candidate: Mapping[str, float],
    baseline: Optional[Mapping[str, float]] = None,
    baseline_uri: Optional[str] = None,
) -> Blessing:
    """Applies `config` to the candidate's (and the baseline's) blessing metrics."""
    config.check_task(truth.task)
    checks: List[Check] = []
    if config.beat_trivial:
        for metric, value in trivial_metrics(truth).items():
            checks.append(_check("trivial", metric, candidate[metric], value, True, "better than the trivial model"))
    for metric, bound in sorted(config.thresholds.items()):
        checks.append(_check("threshold", metric, candidate[metric], float(bound), False, "threshold"))
    comparison = config.comparison_for(truth.task)
    if baseline is not None:
        sign = 1.0 if higher_is_better(comparison) else -1.0
        bound = baseline[comparison] + sign * config.min_improvement
        what = f"vs baseline {baseline[comparison]:.4f} with min_improvement {config.min_improvement:g}"
        checks.append(_check("baseline", comparison, candidate[comparison], bound, False, what))
    return Blessing(
        blessed=all(c.passed for c in checks),
        checks=tuple(checks),
        candidate_metrics=dict(candidate),
        comparison_metric=comparison,
        num_examples=len(truth.keys),
        baseline_uri=baseline_uri,
        baseline_metrics=dict(baseline) if baseline is not None else None,
    )


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
    """

    metrics: Dict[str, float]
    global_step: int
    checkpoint: str
    blessing: Blessing
    classes: Tuple[str, ...] = ()
    confusion_matrix: Optional[List[List[int]]] = None
    roc: Optional[Dict[str, List[float]]] = None


def _baseline_schema(baseline_dir: str, schema: Schema) -> Schema:
    """The schema the baseline was exported with; its label must be the candidate's."""
    from estimator_lib.export import read_export_metadata

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

    Steps: (1) the estimator's metrics on the eval split; (2) the candidate's predictions for the eval rows
    from the same checkpoint; (3) the baseline's predictions for the same rows from its SavedModel, with its
    own schema and vocabularies; (4) blessing metrics of both from `compute_metrics`; (5) the verdict.

    Args:
      job: the `JobConfig` the model was trained with, placed for this stage.
      prepared: the `PrepareResult` of the dataset (schema, eval files, counts).
      model_dir: the estimator's model directory.
      config: when to bless.
      baseline_dir: the baseline's SavedModel directory (the last published model), or None.
      work_dir: where both models' predictions are written (candidate/, baseline/).
    """
    from estimator_lib import estimator, storage

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
    baseline_metrics = None
    if baseline_dir:
        baseline = _score_saved_model(
            baseline_dir, baseline_schema, eval_files, storage.join(work_dir, "baseline"), truth
        )
        baseline_metrics = compute_metrics(truth, baseline)
    blessing = decide(config, truth, compute_metrics(truth, candidate), baseline_metrics, baseline_dir)
    if truth.task == REGRESSION:
        return Evaluation(result.metrics, result.global_step, result.checkpoint, blessing)
    return Evaluation(
        result.metrics,
        result.global_step,
        result.checkpoint,
        blessing,
        truth.classes,
        confusion_matrix(truth, candidate),
        roc_curve(truth, candidate),
    )


def _score_checkpoint(job, schema, model_dir, checkpoint, files, count, output_dir, truth) -> Scores:
    """The candidate's predictions for the eval rows, from the evaluated checkpoint (TPU or CPU)."""
    from estimator_lib.predict import batch_predict, read_predictions

    batch_predict(job, schema, model_dir, files, output_dir, num_examples=count, checkpoint_path=checkpoint)
    return scores_from_rows(read_predictions(output_dir), truth, "candidate")


def _score_saved_model(export_dir, schema, files, output_dir, truth) -> Scores:
    """The baseline's predictions for the same rows, from its SavedModel's CPU graph and its own schema."""
    from estimator_lib.predict import predict_from_saved_model, read_predictions

    predict_from_saved_model(export_dir, schema, files, output_dir, num_examples=len(truth.keys))
    return scores_from_rows(read_predictions(output_dir), truth, "baseline")
