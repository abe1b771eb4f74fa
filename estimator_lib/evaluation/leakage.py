"""Leakage: how well each feature alone predicts the label, on rows its rule did not learn from.

A feature that is a copy of the label (or a value known only after it: "refund_issued" for "fraud") gives the
candidate accuracy 1.0 on the eval rows, and every other blessing check passes. So the blessing asks, for each
feature the model reads, how much of the trivial model's error a rule on that one feature removes; near all of it
is a leak (`BlessingConfig.leakage_threshold`), unless the feature is allowed (`allow_leakage`).

The one-feature rule is learned on the rows the candidate learned from (train and valid), on the prepared values
the model reads (`evaluation.reference.Design`: numerics standardised with a missing value at 0, the training
mean; categoricals as vocabulary ids, unknown and missing values in the out-of-vocabulary buckets), and scored on
the eval rows like the candidate (`metrics.compute_metrics`). Its prediction is a group's learned rows' class
shares (classification: the most frequent class is the predicted one) or mean label (regression), where a group
is
  * for a categorical, one id;
  * for a numeric, one distinct learned value: an eval value takes the nearest learned value's (one nearest
    neighbour on the line), so a threshold, a set of buckets, a class code or a monotone copy of the label is
    found exactly, without choosing bins;
  * for an id without learned rows, all learned rows (the trivial model).
Scoring on rows the rule did not learn from is what tells a leak from a key: a unique row id predicts its own
learned rows perfectly, but an eval row's id is new (out of vocabulary, or a number between learned ones), so its
rule does no better than the trivial model. A row number is flagged only when the rows are ordered by the label,
and then it does leak (it is where the label was sorted to).

    skill = (value - trivial) / (1 - trivial)

with value the rule's accuracy (or r2) on the eval rows and trivial the trivial model's (the eval rows' most
frequent class's share; r2 0 for their mean): the share of the trivial model's errors the rule removes (its
misclassified rows; its squared error, of which the share is r2 itself). 1 for a copy of the label, about 0 or
below for a feature unrelated to it, on the same scale for an imbalanced label as for a balanced one.

Runs on the host CPU, in NumPy: per numeric feature one sort of the learned rows and one binary search of the eval
rows, per categorical one count per id; nothing on a TPU.
"""

from __future__ import annotations

import dataclasses
from typing import Collection, Dict, Iterator, Optional, Tuple

import numpy as np

from estimator_lib.evaluation.metrics import Scores, Truth, compute_metrics, trivial_metrics
from estimator_lib.evaluation.reference import Design
from estimator_lib.schema import CATEGORICAL, CLASSIFICATION, FeatureSpec, Schema


@dataclasses.dataclass(frozen=True)
class FeatureScore:
    """How well one feature alone predicts the label on the eval rows.

    Attributes:
      feature: the feature's original name.
      metric: "accuracy" (classification) or "r2" (regression).
      value: the one-feature rule's `metric` on the eval rows.
      trivial: the trivial model's `metric` on the same rows (below 1: `one_feature_scores` scores no feature
        when the eval rows hold one label value).
    """

    feature: str
    metric: str
    value: float
    trivial: float

    @property
    def skill(self) -> float:
        """The share of the trivial model's errors the rule removes: 1 for a copy of the label."""
        return (self.value - self.trivial) / (1.0 - self.trivial)

    def to_dict(self) -> Dict[str, float]:
        """{metric: value, "skill": skill}, what the blessing records per feature."""
        return {self.metric: self.value, "skill": self.skill}


def one_feature_scores(
    schema: Schema,
    learned: Design,
    learned_labels: np.ndarray,
    truth: Truth,
    held_out: Design,
    features: Optional[Collection[str]] = None,
) -> Tuple[FeatureScore, ...]:
    """Each feature's one-feature rule, learned on `learned` and scored on `held_out` (module docstring). Host CPU.

    Args:
      schema: the schema both designs were read with (`reference.read_design`), in its feature order.
      learned: the rows the rules learn from (the rows the candidate learned from).
      learned_labels: their labels, class indices int [N] or values float [N].
      truth: the eval rows' labels, in `held_out`'s row order.
      held_out: the eval rows.
      features: the original names of the features to score (the ones the model reads); None scores all.

    Returns:
      One `FeatureScore` per scored feature, in schema order; none when the eval rows hold a single label value
      (no error for a feature to remove).
    """
    ((metric, trivial),) = trivial_metrics(truth).items()
    if _one_label_value(truth, trivial):
        return ()
    targets = _targets(schema, learned_labels)
    scores = []
    for feature, learned_column, held_out_column in _columns(schema, learned, held_out):
        if features is None or feature.name in features:
            learned_groups, count, held_out_groups = _groups(feature, learned_column, held_out_column)
            predicted = _group_means(learned_groups, count, targets)[held_out_groups]
            value = compute_metrics(truth, _scores(schema, predicted))[metric]
            scores.append(FeatureScore(feature.name, metric, value, trivial))
    order = {f.name: i for i, f in enumerate(schema.features)}
    return tuple(sorted(scores, key=lambda s: order[s.feature]))


def _one_label_value(truth: Truth, trivial: float) -> bool:
    """Whether the eval rows hold a single label value: then the trivial model makes no error to remove."""
    if truth.task == CLASSIFICATION:
        return trivial >= 1.0
    return bool(np.all(truth.labels == truth.labels[0]))


def _targets(schema: Schema, labels: np.ndarray) -> np.ndarray:
    """float64 [N, T]: what a group's rule averages. One-hot classes (T = K; their mean is the class shares), or
    the label's value (T = 1)."""
    if schema.label.task == CLASSIFICATION:
        return np.eye(schema.label.num_classes)[labels.astype(np.int64)]
    return labels.astype(np.float64).reshape(-1, 1)


def _columns(schema: Schema, learned: Design, held_out: Design) -> Iterator[Tuple[FeatureSpec, np.ndarray, np.ndarray]]:
    """Yields (feature, its learned column [N], its held-out column [M]) in the designs' column order: numerics
    (standardised values), then categoricals (ids from 0 to `num_buckets`, the design's shared offset removed)."""
    for j, f in enumerate(schema.numeric):
        yield f, learned.numeric[:, j], held_out.numeric[:, j]
    offset = 0
    for j, f in enumerate(schema.categorical):
        yield f, learned.ids[:, j] - offset, held_out.ids[:, j] - offset
        offset += f.num_buckets


def _groups(feature: FeatureSpec, learned: np.ndarray, held_out: np.ndarray) -> Tuple[np.ndarray, int, np.ndarray]:
    """(learned rows' group int [N], number of groups, held-out rows' group int [M]): a categorical's id, or a
    numeric's distinct learned value, the nearest one for a held-out value."""
    if feature.kind == CATEGORICAL:
        return learned, feature.num_buckets, held_out
    values, learned_groups = np.unique(learned, return_inverse=True)
    return learned_groups.reshape(-1), len(values), _nearest(values, held_out)


def _nearest(values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """int [M]: the index of the value of sorted distinct `values` [V] nearest each of `x` [M] (the lower one of
    two at the same distance)."""
    right = np.minimum(np.searchsorted(values, x), len(values) - 1)
    left = np.maximum(right - 1, 0)
    return np.where(np.abs(values[right] - x) < np.abs(x - values[left]), right, left)


def _group_means(groups: np.ndarray, count: int, targets: np.ndarray) -> np.ndarray:
    """float64 [count, T]: the mean target of each group's rows; a group without rows (an id no learned row has)
    gets the mean over all rows, the trivial model's."""
    rows = np.bincount(groups, minlength=count).astype(np.float64)[:, None]
    sums = np.stack([np.bincount(groups, weights=t, minlength=count) for t in targets.T], axis=1)
    return np.where(rows > 0, sums / np.maximum(rows, 1.0), targets.mean(axis=0))


def _scores(schema: Schema, predicted: np.ndarray) -> Scores:
    """The rule's predictions as `Scores`: the most likely class (ties: the first) and the class shares, or the
    mean label."""
    if schema.label.task != CLASSIFICATION:
        return Scores(predicted[:, 0])
    classes = np.asarray(schema.label.classes, dtype=object)
    return Scores(classes[predicted.argmax(axis=1)], predicted)
