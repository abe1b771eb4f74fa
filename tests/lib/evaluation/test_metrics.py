"""Evaluation metrics (`evaluation/metrics.py`): exact values on a few rows, worked out by hand; one definition
per name; only eval rows count."""

from __future__ import annotations

import math

import numpy as np
import pytest

from estimator_lib import evaluation as b
from estimator_lib.config import TASK_METRICS, BlessingError
from estimator_lib.evaluation import Truth
from estimator_lib.evaluation import metrics as m

CLASSES = ("a", "b", "c")


def truth3() -> Truth:
    return Truth(("k0", "k1", "k2", "k3"), np.array(["a", "b", "c", "a"], dtype=object), CLASSES)


def rows3(order=CLASSES):
    """Prediction rows for truth3: right, right, wrong (says "a"), right; probabilities keyed by class name."""
    probs = [
        {"a": 0.7, "b": 0.2, "c": 0.1},
        {"a": 0.1, "b": 0.8, "c": 0.1},
        {"a": 0.5, "b": 0.1, "c": 0.4},
        {"a": 0.6, "b": 0.3, "c": 0.1},
    ]
    out = []
    for i, p in enumerate(probs):
        out.append({"key": f"k{i}", "class": max(p, key=p.get), "probabilities": {c: p[c] for c in order}})
    return list(reversed(out))  # order of rows does not matter: they are matched by key


def binary4():
    """Labels no, yes, yes, no; p(yes) 0.1, 0.9, 0.6, 0.6 (a tie across the classes); decisions no, yes, yes, yes."""
    truth = Truth(("k0", "k1", "k2", "k3"), np.array(["no", "yes", "yes", "no"], dtype=object), ("no", "yes"))
    rows = [
        {"key": "k0", "class": "no", "probabilities": {"no": 0.9, "yes": 0.1}},
        {"key": "k1", "class": "yes", "probabilities": {"no": 0.1, "yes": 0.9}},
        {"key": "k2", "class": "yes", "probabilities": {"no": 0.4, "yes": 0.6}},
        {"key": "k3", "class": "yes", "probabilities": {"no": 0.4, "yes": 0.6}},
    ]
    return truth, rows


# -- the definitions ---------------------------------------------------------------------------------------------
def test_auc_counts_ordered_pairs_and_ties_half():
    positive = np.array([True, True, False, False])
    assert m.auc(positive, np.array([0.9, 0.6, 0.1, 0.6])) == pytest.approx(3.5 / 4)
    assert m.auc(positive, np.array([0.9, 0.3, 0.6, 0.1])) == pytest.approx(3 / 4)
    assert math.isnan(m.auc(np.array([True, True]), np.array([0.2, 0.3])))


def test_average_precision_by_hand():
    # ranked: + - + - +: precision 1, 2/3, 3/5 where recall rises by 1/3
    positive = np.array([True, False, True, False, True])
    assert m.average_precision(positive, np.array([0.9, 0.8, 0.7, 0.6, 0.5])) == pytest.approx(34 / 45)
    # tied scores are one threshold: {0.9: +}, {0.5: +, -}: 1/2 * 1 + 1/2 * 2/3
    assert m.average_precision(np.array([True, True, False]), np.array([0.9, 0.5, 0.5])) == pytest.approx(5 / 6)
    assert math.isnan(m.average_precision(np.array([False, False]), np.array([0.9, 0.5])))


def test_precision_and_recall_of_a_class_never_predicted_or_absent_are_zero():
    actual, predicted = np.array([True, True, False, False]), np.array([True, False, True, True])
    assert m.precision_recall(actual, predicted) == pytest.approx((1 / 3, 1 / 2))
    assert m.precision_recall(actual, np.zeros(4, bool)) == (0.0, 0.0)
    assert m.precision_recall(np.zeros(4, bool), predicted) == (0.0, 0.0)


# -- every reported metric, by hand ------------------------------------------------------------------------------
def test_binary_reported_metrics_exact():
    truth, rows = binary4()
    metrics = b.reported_metrics(truth, b.scores_from_rows(rows, truth, "candidate"))
    log_loss = -(2 * math.log(0.9) + math.log(0.6) + math.log(0.4)) / 4
    assert metrics == pytest.approx(
        {
            "accuracy": 0.75,
            "log_loss": log_loss,
            "auc": 0.875,  # positives {0.9, 0.6} vs negatives {0.1, 0.6}: 1 + 1 + 1 + 0.5 (tie) of 4 pairs
            "auc_pr": 5 / 6,  # {0.9: +} then {0.6: +, -}: 1/2 * 1 + 1/2 * 2/3
            "precision": 2 / 3,
            "recall": 1.0,
        }
    )


def test_multiclass_reported_metrics_exact():
    truth = truth3()  # labels a, b, c, a; decisions a, b, a, a
    metrics = b.reported_metrics(truth, b.scores_from_rows(rows3(), truth, "candidate"))
    log_loss = -(math.log(0.7) + math.log(0.8) + math.log(0.4) + math.log(0.6)) / 4
    # Every class's own probability ranks its rows first: every one-vs-rest AUC and average precision is 1.
    per_class = {"a": (2 / 3, 1.0), "b": (1.0, 1.0), "c": (0.0, 0.0)}  # c is never predicted
    expected = {"accuracy": 0.75, "log_loss": log_loss, "auc": 1.0}
    for cls, (precision, recall) in per_class.items():
        expected.update({f"precision/{cls}": precision, f"recall/{cls}": recall})
        expected.update({f"auc/{cls}": 1.0, f"auc_pr/{cls}": 1.0})
    expected.update({"macro_precision": 5 / 9, "macro_recall": 2 / 3, "macro_auc_pr": 1.0})
    assert metrics == pytest.approx(expected)


def test_the_macro_auc_averages_the_classes_present():
    truth = Truth(("k0", "k1"), np.array(["a", "b"], dtype=object), CLASSES)  # no "c" row: its AUC is undefined
    scores = b.Scores(np.array(["a", "a"], dtype=object), np.array([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1]]))
    metrics = b.reported_metrics(truth, scores)
    assert math.isnan(metrics["auc/c"]) and math.isnan(metrics["auc_pr/c"])
    assert metrics["auc/a"] == metrics["auc/b"] == metrics["auc"] == 1.0


def test_regression_reported_metrics_exact():
    truth = Truth(("k0", "k1", "k2"), np.array([1.0, 2.0, 3.0]))
    rows = [{"key": "k0", "value": 1.5}, {"key": "k1", "value": 2.0}, {"key": "k2", "value": 2.0}]
    metrics = b.reported_metrics(truth, b.scores_from_rows(rows, truth, "candidate"))
    assert metrics == pytest.approx(
        {"mse": 1.25 / 3, "rmse": math.sqrt(1.25 / 3), "mae": 0.5, "r2": 1 - 1.25 / 2.0}  # errors 0.5, 0, -1
    )


def test_the_blessing_metrics_are_the_reported_values_not_a_second_computation():
    truth, rows = binary4()
    scores = b.scores_from_rows(rows, truth, "candidate")
    reported = b.reported_metrics(truth, scores)
    blessing = b.blessing_metrics(reported, truth.task)
    assert list(blessing) == list(TASK_METRICS["classification"])
    assert all(blessing[name] == reported[name] for name in blessing)
    assert b.compute_metrics(truth, scores) == blessing


# -- only eval rows count ----------------------------------------------------------------------------------------
def test_prediction_rows_that_are_not_eval_rows_do_not_count():
    """A padded row (an empty Example: empty key) or any other stray row changes nothing."""
    truth, rows = binary4()
    padded = rows + [
        {"key": "", "class": "yes", "probabilities": {"no": 0.0, "yes": 1.0}},
        {"key": "k9", "class": "no", "probabilities": {"no": 1.0, "yes": 0.0}},
    ]
    real = b.reported_metrics(truth, b.scores_from_rows(rows, truth, "candidate"))
    assert b.reported_metrics(truth, b.scores_from_rows(padded, truth, "candidate")) == real


def test_predictions_must_cover_every_eval_row():
    truth = truth3()
    with pytest.raises(BlessingError, match="the baseline predictions miss 1 of 4 eval rows"):
        b.scores_from_rows(rows3()[1:], truth, "baseline")


# -- moved from test_blessing.py ---------------------------------------------------------------------------------
def test_multiclass_metrics_exact():
    truth = truth3()
    metrics = b.compute_metrics(truth, b.scores_from_rows(rows3(), truth, "candidate"))
    assert metrics["accuracy"] == pytest.approx(0.75)
    assert metrics["log_loss"] == pytest.approx(-(math.log(0.7) + math.log(0.8) + math.log(0.4) + math.log(0.6)) / 4)
    # One-vs-rest AUCs: a: pos {0.7, 0.6} vs neg {0.1, 0.5} -> 1.0; b: pos {0.8} vs {0.2, 0.1, 0.3} -> 1.0;
    # c: pos {0.4} vs {0.1, 0.1, 0.1} -> 1.0.
    assert metrics["auc"] == pytest.approx(1.0)


def test_classes_are_matched_by_name_not_position():
    """A baseline that lists classes in another order, and knows a class the data lacks, scores the same."""
    truth = truth3()
    reordered = rows3(order=("c", "a", "b"))
    for row in reordered:
        row["probabilities"]["z"] = 0.0
    same = b.compute_metrics(truth, b.scores_from_rows(reordered, truth, "baseline"))
    assert same == b.compute_metrics(truth, b.scores_from_rows(rows3(), truth, "candidate"))


def test_a_class_the_baseline_never_knew_gets_probability_zero():
    truth = truth3()
    rows = [{"key": f"k{i}", "class": "a", "probabilities": {"a": 0.9, "b": 0.1}} for i in range(4)]
    scores = b.scores_from_rows(rows, truth, "baseline")
    assert scores.probabilities[:, 2].tolist() == [0.0, 0.0, 0.0, 0.0]
    metrics = b.compute_metrics(truth, scores)
    assert metrics["accuracy"] == pytest.approx(0.5)
    assert metrics["log_loss"] == pytest.approx((-2 * math.log(0.9) - math.log(0.1) - math.log(1e-15)) / 4)


def test_binary_auc_and_ties():
    truth, rows = binary4()
    metrics = b.compute_metrics(truth, b.scores_from_rows(rows, truth, "candidate"))
    # positives {0.9, 0.6} vs negatives {0.1, 0.6}: pairs 1 + 1 + 1 + 0.5 (tie) = 3.5 of 4.
    assert metrics["auc"] == pytest.approx(0.875)
    assert metrics["accuracy"] == pytest.approx(0.75)


def test_regression_metrics_exact():
    truth = Truth(("k0", "k1", "k2"), np.array([1.0, 2.0, 3.0]))
    rows = [{"key": "k0", "value": 1.5}, {"key": "k1", "value": 2.0}, {"key": "k2", "value": 2.0}]
    metrics = b.compute_metrics(truth, b.scores_from_rows(rows, truth, "candidate"))
    assert metrics["rmse"] == pytest.approx(math.sqrt((0.25 + 0 + 1) / 3))
    assert metrics["mae"] == pytest.approx(0.5)
    assert metrics["r2"] == pytest.approx(1 - 1.25 / 2.0)


def test_confusion_matrix_and_roc_curve():
    truth = truth3()
    scores = b.scores_from_rows(rows3(), truth, "candidate")
    assert b.confusion_matrix(truth, scores) == [[2, 0, 0], [0, 1, 0], [1, 0, 0]]
    roc = b.roc_curve(truth, scores, points=3)  # thresholds 1.0, 0.5, 0.0; micro-average over 12 decisions
    assert roc["thresholds"] == [1.0, 0.5, 0.0]
    assert roc["tpr"] == [0.0, pytest.approx(3 / 4), 1.0]  # 0.7, 0.8, 0.6 of true classes are >= 0.5
    assert roc["fpr"] == [0.0, pytest.approx(1 / 8), 1.0]  # 0.5 ("a" for a "c" row) of 8 negatives


def test_paired_standard_errors_are_those_of_the_per_row_differences():
    truth = truth3()
    candidate = b.scores_from_rows(rows3(), truth, "candidate")  # right, right, wrong, right
    reference = b.Scores(np.array(["a", "b", "c", "b"], dtype=object), np.full((4, 3), 1 / 3))  # r, r, r, wrong
    errors = b.paired_standard_errors(truth, candidate, reference)
    assert errors["accuracy"] == pytest.approx(np.std([0, 0, -1, 1], ddof=1) / 2)
    log_ratio = [math.log(0.7 * 3), math.log(0.8 * 3), math.log(0.4 * 3), math.log(0.6 * 3)]
    assert errors["log_loss"] == pytest.approx(np.std(log_ratio, ddof=1) / 2)
    numbers = Truth(("k0", "k1", "k2"), np.array([1.0, 2.0, 3.0]))
    regression = b.paired_standard_errors(numbers, b.Scores(np.array([1.0, 2.0, 4.0])), b.Scores(np.array([2.0] * 3)))
    assert regression["r2"] == pytest.approx(np.std([1.5, 0.0, 0.0], ddof=1) / math.sqrt(3))  # variance 2/3
    assert regression["mae"] == pytest.approx(np.std([1.0, 0.0, 0.0], ddof=1) / math.sqrt(3))
