"""Evaluation metrics in NumPy, on the host CPU: one implementation for every model that is compared.

The candidate (scored from its checkpoint) and the baseline (scored from its exported SavedModel) are turned
into metrics here, on the same eval rows, so the comparison is fair. Classes are matched by name, not index:
a baseline trained when the label had other classes, or listed them in another order, is still scored
correctly (a class it never knew gets probability 0).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from estimator_lib.config import BlessingError
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
    rows = np.arange(len(truth.keys))
    index = truth.label_index

    def per_row(scores: Scores):
        p_true = np.clip(scores.probabilities[rows, index], _EPSILON, 1.0)
        return (scores.predicted == truth.labels).astype(np.float64), -np.log(p_true)

    (c_right, c_loss), (r_right, r_loss) = per_row(candidate), per_row(reference)
    return {"accuracy": _standard_error(c_right - r_right), "log_loss": _standard_error(c_loss - r_loss)}


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
