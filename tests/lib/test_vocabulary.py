"""The metric vocabulary: one name per metric, its table in the docs, and numbers rounded for people."""

from __future__ import annotations

import os

import numpy as np
import pytest

from estimator_lib import vocabulary
from estimator_lib.evaluation.metrics import Scores, Truth, reported_metrics
from tests.repo import ROOT

DOC = os.path.join(ROOT, "docs", "metrics.md")


def test_the_docs_table_is_the_vocabulary():
    with open(DOC, encoding="utf-8") as f:
        assert vocabulary.markdown_table() in f.read()


def binary() -> tuple:
    truth = Truth(("a", "b", "c", "d"), np.array(["n", "y", "y", "n"], dtype=object), ("n", "y"))
    p = np.array([0.2, 0.9, 0.4, 0.6])
    return truth, Scores(np.array(["n", "y", "n", "y"], dtype=object), np.stack([1 - p, p], axis=1))


def three_classes() -> tuple:
    truth = Truth(("a", "b", "c"), np.array(["x", "y", "z"], dtype=object), ("x", "y", "z"))
    probabilities = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.2, 0.5, 0.3]])
    return truth, Scores(np.array(["x", "y", "y"], dtype=object), probabilities)


def regression() -> tuple:
    return Truth(("a", "b", "c"), np.array([1.0, 2.0, 4.0])), Scores(np.array([1.5, 2.0, 3.0]))


@pytest.mark.parametrize("make", [binary, three_classes, regression])
def test_every_reported_metric_has_one_name_in_the_vocabulary(make):
    names = set(reported_metrics(*make()))
    assert all(vocabulary.describe(name) for name in names)
    assert not names & set(vocabulary.RETIRED)
    assert not any(name.startswith(("auc_roc", "macro_auc_roc")) for name in names)


def test_the_headline_names_each_tasks_metrics_and_r2_for_regression():
    assert vocabulary.headline(reported_metrics(*regression())) == ("rmse", "mae", "r2")
    assert vocabulary.headline(reported_metrics(*binary())) == ("accuracy", "auc", "log_loss")
    assert vocabulary.headline({"user_metric": 1.0}) == ("user_metric",)


def test_per_class_names_are_described_by_their_pattern():
    assert vocabulary.describe("auc/Adelie").name == "auc/<class>"
    with pytest.raises(KeyError, match=r"metric 'mean_loss' is not in the vocabulary"):
        vocabulary.describe("mean_loss")


@pytest.mark.parametrize(
    "value, shown",
    [
        (1.0000001, "1.000"),
        (0.9761904761904762, "0.9762"),
        (0.0712, "0.0712"),
        (323.9590741354951, "324.0"),
        (104949.4817147272, "104949"),
        (0.0, "0.0000"),
        (-0.25, "-0.2500"),
        (float("nan"), "nan"),
        (1.5e-7, "1.500e-07"),
    ],
)
def test_numbers_for_people_keep_four_significant_digits(value, shown):
    assert vocabulary.format_value(value) == shown


def test_deltas_are_signed():
    assert vocabulary.format_delta(0.0025) == "+0.0025"
    assert vocabulary.format_delta(-3.5) == "-3.500"
    assert vocabulary.format_metrics({"rmse": 324.01, "r2": 0.78236}, ("rmse", "r2")) == "rmse=324.0, r2=0.7824"
