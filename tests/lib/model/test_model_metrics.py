"""The host-side metric_fns (`model/metrics.py`) on a few hand-made rows: exact values, padding weighted out.

Each case feeds the real rows and padded rows (weight 0, labels and scores chosen so that a leak would change
every metric) in two batches, as a TPU eval streams them, and checks the values worked out by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import reference_metrics
import tensorflow as tf

from estimator_lib.model import metrics
from estimator_lib.schema import LabelSpec


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def streamed(metric_fn, batches):
    """Runs `metric_fn` on the host graph over `batches` of (labels, logits, per_example_loss, weights)."""
    labels, logits = batches[0][:2]
    with tf.Graph().as_default():
        label_ph = tf.compat.v1.placeholder(tf.as_dtype(np.asarray(labels).dtype), [None])
        logits_ph = tf.compat.v1.placeholder(tf.float32, [None, np.asarray(logits).shape[1]])
        loss_ph, weights_ph = tf.compat.v1.placeholder(tf.float32, [None]), tf.compat.v1.placeholder(tf.float32, [None])
        ops = metric_fn(label_ph, logits_ph, loss_ph, weights_ph)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.local_variables_initializer())
            for batch in batches:
                session.run(
                    [update for _, update in ops.values()], dict(zip((label_ph, logits_ph, loss_ph, weights_ph), batch))
                )
            return {
                name: float(v) for name, v in session.run({name: value for name, (value, _) in ops.items()}).items()
            }


# Binary: real rows (label, p) = (1, .9), (0, .6), (1, .3), (0, .1); two padded rows (1, .05) and (0, .95).
BINARY_P = [0.9, 0.6, 0.3, 0.1, 0.05, 0.95]
BINARY_BATCHES = [
    (np.array([1, 0, 1], np.int32), [[logit(p)] for p in BINARY_P[:3]], [1.0, 2.0, 3.0], [1.0, 1.0, 1.0]),
    (np.array([0, 1, 0], np.int32), [[logit(p)] for p in BINARY_P[3:]], [4.0, 100.0, 100.0], [1.0, 0.0, 0.0]),
]


def test_binary_metric_fn_counts_only_real_rows():
    values = streamed(metrics.binary_metric_fn, BINARY_BATCHES)
    assert sorted(values) == ["accuracy", "precision", "recall", "streaming_auc_pr", "streaming_auc_roc"]
    # predicted positive (p > 0.5): rows 1 and 2, of which row 1 is right; row 4 is a right negative
    assert values["accuracy"] == pytest.approx(0.5)
    assert values["precision"] == pytest.approx(0.5)
    assert values["recall"] == pytest.approx(0.5)
    # 3 of the 4 (positive, negative) pairs are ordered right; the thresholds separate every score here
    assert values["streaming_auc_roc"] == pytest.approx(0.75, abs=1e-5)
    real = np.array([True, False, True, False])
    assert values["streaming_auc_pr"] == pytest.approx(reference_metrics.auc_pr(real, np.array(BINARY_P[:4])), abs=1e-6)
    with_padding = reference_metrics.auc_pr(np.array([1, 0, 1, 0, 1, 0], bool), np.array(BINARY_P))
    assert abs(values["streaming_auc_pr"] - with_padding) > 0.1  # what a leak would look like


def test_the_streaming_auc_is_an_approximation_with_a_name_of_its_own():
    # Scores closer than 1/999 fall between the same thresholds: the streaming AUC cannot order them.
    batches = [(np.array([1, 0], np.int32), [[logit(0.5004)], [logit(0.5001)]], [0.0, 0.0], [1.0, 1.0])]
    values = streamed(metrics.binary_metric_fn, batches)
    assert values["streaming_auc_roc"] == pytest.approx(0.5, abs=1e-5)  # the exact AUC of these rows is 1
    assert "auc_roc" not in values and "auc" not in values


def multiclass_batches():
    """Labels [0, 1, 2, 1] predicted [0, 1, 1, 1]; a padded row (label 0) predicted 2."""
    logits = [[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 1.0, 0.5], [0.0, 3.0, 0.0], [0.0, 0.0, 9.0]]
    return [
        (np.array([0, 1], np.int32), logits[:2], [0.5, 0.5], [1.0, 1.0]),
        (np.array([2, 1, 0], np.int32), logits[2:], [1.5, 0.5, 50.0], [1.0, 1.0, 0.0]),
    ]


def test_multiclass_metric_fn_per_class_and_macro_with_class_names():
    label = LabelSpec("species", "classification", ("a", "b", "c"))
    values = metrics.readable_names(streamed(metrics.metric_fn_for(label), multiclass_batches()), label)
    assert values["accuracy"] == pytest.approx(0.75)
    assert [values[f"precision/{c}"] for c in "abc"] == pytest.approx([1.0, 2 / 3, 0.0])
    assert [values[f"recall/{c}"] for c in "abc"] == pytest.approx([1.0, 1.0, 0.0])
    assert values["macro_precision"] == pytest.approx(5 / 9)
    assert values["macro_recall"] == pytest.approx(2 / 3)
    per_class = [values[f"streaming_auc_roc/{c}"] for c in "abc"]
    assert values["streaming_macro_auc_roc"] == pytest.approx(sum(per_class) / 3)
    assert not any(name.startswith(("auc", "macro_auc")) or "/class_" in name for name in values)


def test_regression_metric_fn_in_the_labels_units():
    label = LabelSpec("price", "regression", mean=10.0, std=2.0)
    # predictions 11, 8, 10 (logits standardised) against labels 12, 8, 7: errors -1, 0, 3; padding far off
    batches = [
        (np.array([12.0, 8.0], np.float32), [[0.5], [-1.0]], [0.25, 0.0], [1.0, 1.0]),
        (np.array([7.0, 100.0], np.float32), [[0.0], [0.0]], [2.25, 2025.0], [1.0, 0.0]),
    ]
    values = streamed(metrics.metric_fn_for(label), batches)
    assert values == pytest.approx({"mse": 10 / 3, "mae": 4 / 3, "rmse": math.sqrt(10 / 3)})


def test_loss_metric_fn_adds_nothing_to_the_estimators_loss():
    assert streamed(metrics.loss_metric_fn, BINARY_BATCHES) == {}


def test_readable_names_leaves_binary_and_regression_names_alone():
    label = LabelSpec("y", "classification", ("no", "yes"))
    assert metrics.readable_names({"accuracy": 1.0, "streaming_auc_roc": 0.5}, label) == {
        "accuracy": 1.0,
        "streaming_auc_roc": 0.5,
    }
