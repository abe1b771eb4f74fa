"""Faults of the blessing: a metric that is not a number, a verdict with nothing to check, a small slice far under
its threshold, a model that replaces a published one without a comparison, a metric of the other task."""

from __future__ import annotations

import math

import numpy as np
import pytest

from estimator_lib.config import BlessingConfig, BlessingError
from estimator_lib.evaluation import Blessing, Scores, Truth, compute_metrics, decide
from estimator_lib.evaluation import slices as s
from estimator_lib.evaluation.blessing import decide_user

USER = BlessingConfig(comparison_metric="accuracy", beat_trivial=False, reference_margin=None)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_metric_that_is_not_a_number_blocks_the_blessing_naming_it(value):
    verdict = decide_user(USER, {"accuracy": value, "loss": 0.3}, 40)
    assert not verdict.blessed
    assert verdict.reasons == (
        f"accuracy={value} on the 40 eval rows is not a finite number, so the model cannot be judged on it: check "
        "how it is computed (a division by zero, a log of 0, an AUC of rows of one class)",
    )
    assert verdict.candidate_metrics == {"loss": 0.3}  # what a record (KFP's metadata) can hold
    truth = Truth(("k0", "k1"), np.array(["a", "b"], dtype=object), ("a", "b"))
    built_in = decide(BlessingConfig(confidence=0.5), truth, {"accuracy": 1.0, "log_loss": 0.1, "auc": value})
    assert not built_in.blessed and built_in.reasons[0].startswith(f"auc={value} on the 2 eval rows is not a finite")


def test_nothing_to_check_is_blessed_only_as_a_first_model_and_says_so():
    verdict = decide_user(USER, {"accuracy": 0.5}, 40)
    assert verdict.blessed and not verdict.checks
    assert verdict.summary() == "blessed: first model: no threshold and no published model to compare with"


def test_a_model_that_replaces_a_published_one_without_comparing_says_what_and_how_they_compare():
    verdict = decide_user(USER, {"accuracy": 0.9655}, 58)
    published = {"candidate_metrics": {"accuracy": 0.9828}, "num_examples": 58, "comparison_metric": "accuracy"}
    replacing = verdict.replacing("20260101T000000Z-abc", published, "--baseline none")
    assert replacing.blessed
    assert replacing.summary() == (
        "blessed: no threshold, and no baseline to compare with; replaces version 20260101T000000Z-abc without "
        "comparing (--baseline none): accuracy 0.9655 here, 0.9828 recorded for it, each on its own run's eval rows "
        "(58 then, 58 now), which need not be the same rows"
    )
    other = replacing.replacing("v1", {**published, "num_examples": 60}, "--baseline none")
    assert other.summary().endswith(
        "accuracy 0.9655 here, 0.9828 recorded for it, on different eval rows (60 then, 58 now)"
    )
    assert Blessing.from_dict(replacing.to_dict()) == replacing
    assert "replaces" not in verdict.to_dict()  # a verdict that replaces nothing keeps its record's bytes


def penguin_like():
    """60 eval rows: Biscoe (43 rows, 40 right) and Dream (17 rows, 3 right, its labels randomised)."""
    classes = ("Adelie", "Gentoo")
    labels = np.array(["Adelie", "Gentoo"] * 30, dtype=object)
    right = np.array([True] * 40 + [False] * 3 + [True] * 3 + [False] * 14)
    predicted = np.where(right, labels, np.where(labels == "Adelie", "Gentoo", "Adelie")).astype(object)
    p = np.where(predicted == "Gentoo", 0.9, 0.1)
    truth = Truth(tuple(f"k{i}" for i in range(60)), labels, classes)
    sets = s.assign_slices({"island": np.array(["Biscoe"] * 43 + ["Dream"] * 17, dtype=object)}, ["island"])
    return truth, Scores(predicted, np.stack([1 - p, p], axis=1)), sets


def test_a_small_slice_whose_interval_lies_wholly_under_the_threshold_fails():
    truth, scores, sets = penguin_like()
    config = BlessingConfig(slices=("island",), slice_thresholds={"accuracy": 0.85}, confidence=0.95)
    overall = compute_metrics(truth, scores)
    table = s.optional_table(config, truth, scores, sets, overall, "accuracy")
    dream = next(e for e in table["slices"] if e["name"] == "island=Dream")
    assert (dream["rows"], round(dream["metrics"]["accuracy"], 4), dream["judged"], dream["passed"]) == (
        17,
        0.1765,
        True,
        False,
    )
    low, high = table["intervals"]["island=Dream"]["accuracy"]
    assert 0 <= low < high < 0.85
    verdict = decide(config, truth, overall, slices=table)
    assert not verdict.blessed
    assert [r for r in verdict.reasons if "Dream" in r] == [
        f"slice island=Dream (17 rows, under blessing.min_slice_rows=20): accuracy=0.1765, its 0.95 interval "
        f"[{low:.4f}, {high:.4f}] lies wholly under 0.8500: fails"
    ]


def test_a_small_slice_whose_interval_straddles_the_threshold_is_too_small_to_judge_either_way():
    truth, scores, sets = penguin_like()
    config = BlessingConfig(slices=("island",), slice_thresholds={"accuracy": 0.2})
    table = s.optional_table(config, truth, scores, sets, compute_metrics(truth, scores), "accuracy")
    dream = next(e for e in table["slices"] if e["name"] == "island=Dream")
    assert (dream["judged"], dream["passed"]) == (False, None)
    assert s.shown(table)["judged"] == 1


def test_a_metric_of_the_other_task_is_refused_naming_the_metrics_of_the_task():
    config = BlessingConfig(thresholds={"rmse": 0.1})
    with pytest.raises(
        BlessingError,
        match=r"blessing metric\(s\) \['rmse'\] do not apply to a classification label; use \['accuracy', "
        r"'log_loss', 'auc'\]",
    ):
        config.check_task("classification")
    both = BlessingConfig(thresholds={"rmse": 0.1}, slice_thresholds={"accuracy": 0.8}, slices=("island",))
    with pytest.raises(
        BlessingError,
        match=r"blessing names metrics of a classification label \['accuracy'\] and of a regression label "
        r"\['rmse'\]; a run has one task: keep one of them",
    ):
        both.check_task(None)  # the task is not known yet (inferred from the data)
    config.check_task(None)
