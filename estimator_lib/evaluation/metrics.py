"""Evaluation metrics in NumPy, on the host CPU: one implementation for every model that is compared.

The candidate (scored from its checkpoint, in the one pass the evaluate stage makes over the eval split), the
baseline (scored from its exported SavedModel) and the linear reference are turned into metrics here, on the same
eval rows, so the comparison is fair. Each name has one exact definition (over every distinct score, in float64);
the host-side metric_fn of a TPU eval (`model.metrics`) reports its thresholded AUCs under names of their own.
Classes are matched by name, not index: a baseline trained when the label had other classes, or listed them in
another order, is still scored correctly (a class it never knew gets probability 0).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from estimator_lib.config import TASK_METRICS, BlessingError
from estimator_lib.schema import CLASSIFICATION, REGRESSION

ROC_POINTS = 101
_EPSILON = 1e-15


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
def auc(positive: np.ndarray, score: np.ndarray, weights: Optional[np.ndarray] = None) -> Any:
    """Exact ROC AUC (Mann-Whitney, ties count half); NaN when a side is empty. positive bool [N], score [N].

    `weights` int [..., N]: how many times each row counts (a bootstrap resample's row counts), one AUC per
    leading index, float [...]; None counts each row once and gives a float. The statistic is an integer (twice
    U, over every positive-negative pair), so the value is U / (P N) rounded once, whatever the weights' order.
    """
    counted = np.ones((1, len(score)), dtype=np.int64) if weights is None else np.asarray(weights)
    negative_rows, positive_rows = np.flatnonzero(~positive), np.flatnonzero(positive)
    order = np.argsort(score[negative_rows], kind="stable")
    negative_rows = negative_rows[order]
    sorted_negatives = score[negative_rows]
    # below[..., j]: the weight of the j lowest-scoring negatives; a positive's ties lie between its two ends.
    below = np.zeros(counted.shape[:-1] + (len(negative_rows) + 1,), dtype=np.int64)
    np.cumsum(np.take(counted, negative_rows, axis=-1), axis=-1, out=below[..., 1:])
    ends = [np.searchsorted(sorted_negatives, score[positive_rows], side) for side in ("left", "right")]
    hits = np.take(counted, positive_rows, axis=-1)
    twice_u = np.sum(hits * (np.take(below, ends[0], axis=-1) + np.take(below, ends[1], axis=-1)), axis=-1)
    pairs = 2.0 * np.sum(hits, axis=-1) * below[..., -1]
    value = np.divide(twice_u, pairs, out=np.full(np.shape(pairs), np.nan), where=pairs > 0)
    return float(value[0]) if weights is None else value


def average_precision(positive: np.ndarray, score: np.ndarray) -> float:
    """Exact area under the precision-recall curve as average precision: sum over every distinct score t of
    (recall(t) - recall(previous t)) * precision(t), rows scoring >= t predicted positive (tied scores are one
    threshold). NaN without a positive row. positive bool [N], score [N]."""
    if not positive.any():
        return float("nan")
    order = np.argsort(-score, kind="stable")
    ranked, hits = score[order], positive[order]
    last_of_tie = np.append(ranked[1:] != ranked[:-1], True)
    true_positives = np.cumsum(hits)[last_of_tie]
    predicted = np.arange(1, len(ranked) + 1)[last_of_tie]
    recall = true_positives / positive.sum()
    return float(np.sum(np.diff(recall, prepend=0.0) * (true_positives / predicted)))


def precision_recall(actual: np.ndarray, predicted: np.ndarray) -> Tuple[float, float]:
    """Precision and recall of one class's decision: actual, predicted bool [N]. A class never predicted has
    precision 0, a class absent from the rows recall 0."""
    hits = float(np.sum(actual & predicted))
    precision = hits / predicted.sum() if predicted.any() else 0.0
    recall = hits / actual.sum() if actual.any() else 0.0
    return precision, recall


def row_hits(truth: Truth, scores: Scores) -> np.ndarray:
    """float [N]: 1 where the predicted class is the label (accuracy is their mean)."""
    return (scores.predicted == truth.labels).astype(np.float64)


def row_log_losses(truth: Truth, scores: Scores) -> np.ndarray:
    """float [N]: -log of the probability given to the label, clipped at 1e-15 (log_loss is their mean)."""
    p_true = scores.probabilities[np.arange(len(truth.keys)), truth.label_index]
    # The C library's log, one row at a time: NumPy's AVX-512 log rounds some rows' last bit otherwise than its
    # other kernels, so the metric (and its bootstrap) would differ between machines.
    return -np.fromiter(map(math.log, np.clip(p_true, _EPSILON, 1.0).tolist()), np.float64, len(p_true))


def mean_defined(values: np.ndarray) -> np.ndarray:
    """float [...]: the mean of `values` [..., K] over its last axis, NaNs (undefined AUCs) left out; NaN when
    all are. A macro average over K classes."""
    values = np.asarray(values, dtype=np.float64)
    defined = ~np.isnan(values)
    count = np.sum(defined, axis=-1)
    total = np.sum(np.where(defined, values, 0.0), axis=-1)
    return np.divide(total, count, out=np.full(np.shape(total), np.nan), where=count > 0)


def _mean_defined(values: Sequence[float]) -> float:
    return float(mean_defined(np.array(values, dtype=np.float64)))


def reported_metrics(truth: Truth, scores: Scores) -> Dict[str, float]:
    """Every metric of one model's scores on the eval rows, each by one exact definition, in float64.

    Classification: `accuracy`, `log_loss` (mean -log p(label); the training loss, cross entropy, on these
    rows), `auc` (ROC AUC of the second class for two classes, else the mean one-vs-rest AUC over the classes
    present), precision and recall of the decision (`scores.predicted`) and `auc_pr` (average precision): for
    two classes `precision`, `recall`, `auc_pr` of the second class; for more, `precision/<class>`,
    `recall/<class>`, `auc/<class>`, `auc_pr/<class>` and the means `macro_precision`, `macro_recall`,
    `macro_auc_pr`. Each name is described in `estimator_lib.vocabulary`.
    Regression: `mse`, `rmse`, `mae`, `r2` in the label's units.
    Rows are the eval rows only: padding never reaches `Truth` or `Scores`.
    """
    if truth.task == REGRESSION:
        return _regression_metrics(truth, scores)
    log_loss = float(np.mean(row_log_losses(truth, scores)))
    out = {"accuracy": float(np.mean(row_hits(truth, scores))), "log_loss": log_loss}
    per_class = _per_class_metrics(truth, scores)
    if len(truth.classes) == 2:
        return {**out, **per_class[truth.classes[1]]}  # its `auc` is `headline_auc`'s
    for cls, values in per_class.items():
        out.update({f"{name}/{cls}": value for name, value in values.items()})
    for name in ("precision", "recall", "auc_pr"):
        out[f"macro_{name}"] = _mean_defined([values[name] for values in per_class.values()])
    out["auc"] = headline_auc(truth, scores)
    return out


def headline_auc(truth: Truth, scores: Scores, weights: Optional[np.ndarray] = None) -> Any:
    """The `auc` of `reported_metrics`: ROC AUC of the second class for two classes, else the mean one-vs-rest
    AUC over the classes present. `weights` int [..., N]: row counts, one AUC per leading index (`auc`)."""
    classes = [1] if len(truth.classes) == 2 else range(len(truth.classes))
    per_class = [auc(truth.labels == truth.classes[k], scores.probabilities[:, k], weights) for k in classes]
    if len(per_class) == 1:
        return per_class[0]
    value = mean_defined(np.stack(per_class, axis=-1))
    return float(value) if weights is None else value


def _per_class_metrics(truth: Truth, scores: Scores) -> Dict[str, Dict[str, float]]:
    """{class: {precision, recall, auc, auc_pr}}, each class against the rest."""
    out = {}
    for k, cls in enumerate(truth.classes):
        actual, probability = truth.labels == cls, scores.probabilities[:, k]
        precision, recall = precision_recall(actual, scores.predicted == cls)
        out[cls] = {
            "precision": precision,
            "recall": recall,
            "auc": auc(actual, probability),
            "auc_pr": average_precision(actual, probability),
        }
    return out


def _regression_metrics(truth: Truth, scores: Scores) -> Dict[str, float]:
    metrics = regression_metrics(truth.labels, scores.predicted - truth.labels)
    return {name: float(value) for name, value in metrics.items()}


def regression_metrics(
    labels: Optional[np.ndarray], error: np.ndarray, names: Sequence[str] = ("mse", "rmse", "mae", "r2")
) -> Dict[str, np.ndarray]:
    """The regression metrics `names` over the last axis of `error` (prediction - label) and `labels`, float
    [..., N]: one value per leading index (the eval rows, or each bootstrap resample of them). mse, rmse, mae in
    the label's units; r2 (NaN when the labels do not vary) is the only one that reads `labels`."""
    return {name: _REGRESSION[name](labels, error) for name in names}


def _mse(labels: Optional[np.ndarray], error: np.ndarray) -> np.ndarray:
    return np.mean(error**2, axis=-1)


def _rmse(labels: Optional[np.ndarray], error: np.ndarray) -> np.ndarray:
    return np.sqrt(_mse(labels, error))


def _mae(labels: Optional[np.ndarray], error: np.ndarray) -> np.ndarray:
    return np.mean(np.abs(error), axis=-1)


def _r2(labels: np.ndarray, error: np.ndarray) -> np.ndarray:
    total = np.sum((labels - np.mean(labels, axis=-1, keepdims=True)) ** 2, axis=-1)
    explained = np.divide(np.sum(error**2, axis=-1), total, out=np.full(np.shape(total), np.nan), where=total > 0)
    return 1.0 - explained


_REGRESSION = {"mse": _mse, "rmse": _rmse, "mae": _mae, "r2": _r2}


def blessing_metrics(metrics: Mapping[str, float], task: str) -> Dict[str, float]:
    """The metrics a blessing compares (`config.TASK_METRICS`: accuracy, log_loss, auc; rmse, mae, r2), taken
    from `reported_metrics` (not computed again)."""
    return {name: metrics[name] for name in TASK_METRICS[task]}


def compute_metrics(truth: Truth, scores: Scores) -> Dict[str, float]:
    """Blessing metrics of one model's scores: accuracy, log_loss, auc or rmse, mae, r2."""
    return blessing_metrics(reported_metrics(truth, scores), truth.task)


def paired_standard_errors(truth: Truth, candidate: Scores, reference: Scores) -> Dict[str, float]:
    """Standard errors of the per-row difference between two models scored on the same rows, for the metrics
    that are means over rows: accuracy and log_loss, or r2 (squared errors over the label's variance) and mae.

    Pairing cancels what the two models share (the hard rows), so this is much smaller than either metric's own
    standard error. The blessing uses it to tell a real gap from the noise of a small eval split.
    """
    if truth.task == REGRESSION:
        variance = float(np.mean((truth.labels - truth.labels.mean()) ** 2)) or 1.0
        c, r = candidate.predicted - truth.labels, reference.predicted - truth.labels
        return {"r2": _standard_error((r**2 - c**2) / variance), "mae": _standard_error(np.abs(r) - np.abs(c))}
    return {
        "accuracy": _standard_error(row_hits(truth, candidate) - row_hits(truth, reference)),
        "log_loss": _standard_error(row_log_losses(truth, candidate) - row_log_losses(truth, reference)),
    }


def _standard_error(differences: np.ndarray) -> float:
    n = len(differences)
    return float(np.std(differences, ddof=1) / math.sqrt(n)) if n > 1 else 0.0


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
