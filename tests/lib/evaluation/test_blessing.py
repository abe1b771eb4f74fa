"""Blessing: thresholds, the trivial model, the linear reference, the baseline (metrics: test_metrics.py)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from estimator_lib import evaluation as b
from estimator_lib.config import BlessingConfig, BlessingError, ConfigError
from estimator_lib.evaluation import Blessing, Truth
from estimator_lib.evaluation.blessing import decide_user

CLASSES = ("a", "b", "c")


def truth3() -> Truth:
    return Truth(("k0", "k1", "k2", "k3"), np.array(["a", "b", "c", "a"], dtype=object), CLASSES)


# z = 0: the plain comparison with the trivial model; the baseline's point value (no per-row scores to pair here)
PLAIN = BlessingConfig(confidence=0.5, baseline_test="plain")


def test_decide_first_run_beats_the_trivial_model_and_thresholds():
    truth = truth3()  # most frequent class "a": 2 of 4
    verdict = b.decide(
        BlessingConfig(thresholds={"accuracy": 0.7, "log_loss": 0.6}, confidence=0.5),
        truth,
        {"accuracy": 0.75, "log_loss": 0.5, "auc": 1.0},
    )
    assert verdict.blessed
    assert [c.name for c in verdict.checks] == ["trivial", "threshold", "threshold"]
    assert verdict.checks[0].bound == 0.5
    refused = b.decide(
        BlessingConfig(thresholds={"log_loss": 0.4}, confidence=0.5),
        truth,
        {"accuracy": 0.75, "log_loss": 0.5, "auc": 1},
    )
    assert not refused.blessed
    assert refused.reasons == ("threshold: log_loss=0.5000 <= 0.4000 fails",)
    assert refused.summary() == "not blessed: threshold: log_loss=0.5000 <= 0.4000 fails"


def test_decide_trivial_model_is_beaten_strictly():
    truth = truth3()
    verdict = b.decide(PLAIN, truth, {"accuracy": 0.5, "log_loss": 1.0, "auc": 0.5})
    assert not verdict.blessed
    assert verdict.reasons == (
        "better than the trivial model (the most frequent class: accuracy 0.5000, plus 0.00 standard errors over "
        "4 rows): accuracy=0.5000 > 0.5000 fails",
    )
    assert b.decide(BlessingConfig(beat_trivial=False), truth, {"accuracy": 0.5, "log_loss": 1, "auc": 0.5}).blessed


def test_the_trivial_model_is_beaten_by_more_than_chance_allows():
    """100 rows, 60 of class "a": a model unrelated to the label reaches 0.6 + 1.645 * sqrt(0.24 / 100) = 0.6806
    at 95% one-sided confidence; for regression r2 up to 1.645^2 / 100 = 0.0271."""
    keys = tuple(f"k{i}" for i in range(100))
    truth = Truth(keys, np.array(["a"] * 60 + ["b"] * 40, dtype=object), ("a", "b"))
    bound = 0.6 + 1.6448536269514722 * math.sqrt(0.24 / 100)
    check = b.decide(BlessingConfig(), truth, {"accuracy": 0.68, "log_loss": 0.6, "auc": 0.7}).checks[0]
    assert (check.passed, check.bound) == (False, pytest.approx(bound))
    assert b.decide(BlessingConfig(), truth, {"accuracy": 0.69, "log_loss": 0.6, "auc": 0.7}).blessed
    numbers = Truth(keys, np.arange(100, dtype=np.float64))
    verdict = b.decide(BlessingConfig(), numbers, {"rmse": 1.0, "mae": 1.0, "r2": 0.027})
    assert verdict.reasons == (
        "better than the trivial model (the mean: r2 0, plus 1.64^2/100 rows for chance): r2=0.0270 > 0.0271 fails",
    )
    assert b.decide(BlessingConfig(), numbers, {"rmse": 1.0, "mae": 1.0, "r2": 0.028}).blessed


def test_decide_against_the_linear_reference():
    truth = truth3()
    candidate = {"accuracy": 0.75, "log_loss": 0.5, "auc": 1.0}
    close = b.decide(PLAIN, truth, candidate, reference={"accuracy": 0.77, "log_loss": 0.4, "auc": 1.0})
    assert close.blessed and [c.name for c in close.checks] == ["trivial", "reference"]
    assert close.checks[1].bound == pytest.approx(0.75)  # 0.77 - the default margin 0.02
    worse = b.decide(
        PLAIN, truth, candidate, reference={"accuracy": 0.8, "log_loss": 0.4, "auc": 1.0}, reference_description="r"
    )
    assert worse.reasons == (
        "no worse than the linear reference 0.8000 by more than 0.02 plus 0.00 x 0.0000 (standard error of the "
        "paired difference over 4 rows): accuracy=0.7500 >= 0.7800 fails",
    )
    assert (worse.reference, worse.reference_metrics["accuracy"]) == ("r", 0.8)
    by_loss = BlessingConfig(confidence=0.5, reference_metric="log_loss", reference_margin=0.05)
    assert b.decide(by_loss, truth, candidate, reference={"accuracy": 1, "log_loss": 0.46, "auc": 1}).blessed
    skipped = BlessingConfig(confidence=0.5, reference_margin=None)
    assert b.decide(skipped, truth, candidate, reference={"accuracy": 1.0, "log_loss": 0.1, "auc": 1.0}).blessed


def test_regression_compares_r2_with_the_reference():
    truth = Truth(("k0", "k1", "k2"), np.array([1.0, 2.0, 3.0]))
    verdict = b.decide(PLAIN, truth, {"rmse": 1.0, "mae": 0.5, "r2": 0.2}, reference={"rmse": 0.5, "mae": 0, "r2": 0.3})
    assert verdict.reasons == (
        "no worse than the linear reference 0.3000 by more than 0.02 plus 0.00 x 0.0000 (standard error of the "
        "paired difference over 3 rows): r2=0.2000 >= 0.2800 fails",
    )


def test_decide_against_a_baseline():
    truth = truth3()
    candidate = {"accuracy": 0.75, "log_loss": 0.5, "auc": 1.0}
    baseline = {"accuracy": 0.75, "log_loss": 0.4, "auc": 1.0}
    assert b.decide(PLAIN, truth, candidate, baseline, "gs://b/v1").blessed  # as good: blessed
    stricter = b.decide(dataclasses.replace(PLAIN, min_improvement=0.05), truth, candidate, baseline, "gs://b/v1")
    assert not stricter.blessed
    assert stricter.reasons == ("vs baseline 0.7500 with min_improvement 0.05: accuracy=0.7500 >= 0.8000 fails",)
    assert stricter.baseline_uri == "gs://b/v1" and stricter.baseline_metrics == baseline
    by_loss_config = dataclasses.replace(PLAIN, comparison_metric="log_loss", min_improvement=-0.2)
    assert b.decide(by_loss_config, truth, candidate, baseline).blessed  # lower is better: 0.5 <= 0.4 + 0.2
    by_loss = dataclasses.replace(PLAIN, comparison_metric="log_loss")
    assert b.decide(by_loss, truth, candidate, baseline).reasons == (
        "vs baseline 0.4000 with min_improvement 0: log_loss=0.5000 <= 0.4000 fails",
    )


def interval(difference: float, low: float, high: float, metric: str = "accuracy") -> dict:
    verdict = "better" if low > 0 else "worse" if high < 0 else "no different"
    return {"metric": metric, "difference": difference, "low": low, "high": high, "verdict": verdict}


def test_the_paired_baseline_check_passes_only_when_the_interval_clears_min_improvement():
    """The default: the lower bound of the paired difference must exceed min_improvement (0: better beyond the
    noise). The bound shown is the value the candidate would need: baseline + min_improvement + the noise."""
    truth, config = truth3(), BlessingConfig(beat_trivial=False)
    candidate = {"accuracy": 0.75, "log_loss": 0.5, "auc": 1.0}
    same = b.decide(config, truth, candidate, candidate, "/p/v1", baseline_interval=interval(0.0, -0.25, 0.25))
    assert same.reasons == (
        "vs baseline 0.7500: difference +0.0000 [-0.2500, +0.2500] at 0.95, not better beyond the noise "
        "(blessing.baseline_test=paired; 'plain' compares the point values)",
    )
    assert same.checks[0].bound == 1.0 and same.baseline_interval == interval(0.0, -0.25, 0.25)
    assert Blessing.from_dict(json.loads(same.to_json())) == same
    zero = b.decide(config, truth, candidate, candidate, baseline_interval=interval(0.0, 0.0, 0.0))
    assert not zero.blessed  # identical models: exactly zero on every resample is not better
    better = b.decide(config, truth, candidate, {"accuracy": 0.5}, baseline_interval=interval(0.25, 0.05, 0.5))
    assert better.blessed and better.checks[0].message == (
        "vs baseline 0.5000: difference +0.2500 [+0.0500, +0.5000] at 0.95, better beyond the noise"
    )
    margin = dataclasses.replace(config, min_improvement=0.1)
    short = b.decide(margin, truth, candidate, {"accuracy": 0.5}, baseline_interval=interval(0.25, 0.05, 0.5))
    assert short.reasons == (
        "vs baseline 0.5000: difference +0.2500 [+0.0500, +0.5000] at 0.95, lower bound +0.0500 not above "
        "min_improvement 0.1 (blessing.baseline_test=paired; 'plain' compares the point values)",
    )
    by_loss = dataclasses.replace(config, comparison_metric="log_loss")
    lower = b.decide(
        by_loss, truth, candidate, {"log_loss": 0.9}, baseline_interval=interval(0.4, 0.1, 0.7, "log_loss")
    )
    assert lower.blessed and lower.checks[0].bound == pytest.approx(0.6)  # 0.5 + (0.1 - 0)
    with pytest.raises(BlessingError, match="blessing.baseline_test=paired needs the paired bootstrap"):
        b.decide(config, truth, candidate, candidate)


def test_a_candidate_with_the_published_versions_weights_is_identical_to_it_whatever_its_checks_say():
    """The baseline check becomes "identical to version V; nothing to publish", failed, and the summary says only
    that, whether the checks passed (a plain test) or not (a threshold and the paired test failed)."""
    truth, candidate = truth3(), {"accuracy": 0.75, "log_loss": 0.5, "auc": 1.0}
    paired = BlessingConfig(thresholds={"log_loss": 0.4}, beat_trivial=False)
    noise = interval(1e-6, -0.25, 0.25)
    for config in (PLAIN, paired):
        verdict = b.decide(config, truth, candidate, candidate, "/p/versions/V1", baseline_interval=noise)
        same = verdict.identical_to("V1")
        message = "identical to version V1; nothing to publish"
        assert not same.blessed and same.identical == message and same.summary() == message
        assert [c.name for c in same.checks] == [c.name.replace("baseline", "identical") for c in verdict.checks]
        assert same.checks[-1] == dataclasses.replace(
            verdict.checks[-1], name="identical", passed=False, message=message
        )
        assert same.reasons == tuple(r for r in verdict.reasons if r.startswith("threshold")) + (message,)
        assert Blessing.from_dict(json.loads(same.to_json())).summary() == message
        assert verdict.identical == ""
    with pytest.raises(ValueError, match="compared with no baseline, so it cannot be identical to version V1"):
        b.decide(PLAIN, truth, candidate).identical_to("V1")


def test_the_plain_baseline_check_blesses_an_equal_model():
    truth, candidate = truth3(), {"accuracy": 0.75, "log_loss": 0.5, "auc": 1.0}
    plain = BlessingConfig(beat_trivial=False, baseline_test="plain")
    verdict = b.decide(plain, truth, candidate, candidate, baseline_interval=interval(0.0, 0.0, 0.0))
    assert verdict.blessed and verdict.baseline_interval is None
    assert verdict.checks[0].message == "vs baseline 0.7500 with min_improvement 0: accuracy=0.7500 >= 0.7500 holds"


def test_a_user_model_under_the_paired_test_must_be_strictly_better():
    """A metric_fn reports aggregates only: nothing to pair, so "paired" asks for strictly better."""
    config = BlessingConfig(comparison_metric="nll", directions={"nll": "lower"})
    same = decide_user(config, {"nll": 0.3}, 10, {"nll": 0.3}, "/p/v1")
    assert same.reasons == (
        "vs baseline 0.3000 with min_improvement 0: nll=0.3000 < 0.3000 fails (blessing.baseline_test=paired: your "
        "metric_fn reports aggregate metrics only, no per-row outputs to pair, so the candidate must be strictly "
        "better; 'plain' accepts equal)",
    )
    assert decide_user(config, {"nll": 0.29}, 10, {"nll": 0.3}).blessed
    assert decide_user(dataclasses.replace(config, baseline_test="plain"), {"nll": 0.3}, 10, {"nll": 0.3}).blessed


def test_bootstrap_settings_are_validated_naming_the_fix():
    with pytest.raises(BlessingError, match=r"blessing.bootstrap_replicates=10 must be an integer in \[100, 100000\]"):
        BlessingConfig(bootstrap_replicates=10)
    with pytest.raises(BlessingError, match="blessing.bootstrap_seed=-1 must be an integer >= 0, e.g. 0"):
        BlessingConfig(bootstrap_seed=-1)
    with pytest.raises(BlessingError, match=r"blessing.baseline_test='exact' must be one of \['paired', 'plain'\]"):
        BlessingConfig(baseline_test="exact")


def test_regression_defaults_compare_rmse_and_beat_the_mean():
    truth = Truth(("k0", "k1", "k2"), np.array([1.0, 2.0, 3.0]))
    verdict = b.decide(PLAIN, truth, {"rmse": 1.0, "mae": 0.5, "r2": 0.2}, {"rmse": 1.1, "mae": 1, "r2": 0})
    assert verdict.blessed and verdict.comparison_metric == "rmse"
    assert [(c.name, c.metric) for c in verdict.checks] == [("trivial", "r2"), ("baseline", "rmse")]


def test_config_validation_messages():
    with pytest.raises(BlessingError, match="unknown blessing metric 'f1'"):
        BlessingConfig(thresholds={"f1": 0.5})
    with pytest.raises(BlessingError, match="threshold accuracy='high' must be a finite number"):
        BlessingConfig(thresholds={"accuracy": "high"})
    with pytest.raises(ConfigError, match=r"unknown field\(s\) \['min_improvment'\] in BlessingConfig"):
        BlessingConfig.from_dict({"min_improvment": 0.1})
    with pytest.raises(BlessingError, match=r"\['rmse'\] do not apply to a classification label"):
        BlessingConfig(thresholds={"rmse": 1.0}).check_task("classification")


def test_blessing_round_trips_through_json():
    verdict = b.decide(
        dataclasses.replace(PLAIN, min_improvement=0.01),
        truth3(),
        {"accuracy": 0.75, "log_loss": 0.5, "auc": 1},
        {"accuracy": 0.5, "log_loss": 0.9, "auc": 0.7},
        "/p/v1",
        {"accuracy": 0.75, "log_loss": 0.6, "auc": 0.9},
        "logistic regression on the normalised features",
    )
    again = Blessing.from_dict(json.loads(verdict.to_json()))
    assert again == verdict
    assert again.to_dict()["reasons"] == []
    record = json.loads(verdict.to_json())
    del record["reference"], record["reference_metrics"]  # a record written before the reference existed
    assert Blessing.from_dict(record).reference_metrics is None


def test_the_reference_gap_that_chance_explains_is_tolerated():
    """60 rows: 0.9 against the reference's 0.95 is 3 rows. With a paired standard error of 0.03, the bound is
    0.95 - 0.02 - 1.645 * 0.03 = 0.8807; with 0.01 it is 0.9136."""
    keys = tuple(f"k{i}" for i in range(60))
    truth = Truth(keys, np.array(["a"] * 30 + ["b"] * 30, dtype=object), ("a", "b"))
    candidate, reference = {"accuracy": 0.9, "log_loss": 0.3, "auc": 0.9}, {"accuracy": 0.95, "log_loss": 0.2, "auc": 1}
    noisy = b.decide(BlessingConfig(), truth, candidate, reference=reference, reference_errors={"accuracy": 0.03})
    assert noisy.blessed and noisy.checks[1].bound == pytest.approx(0.95 - 0.02 - 1.6448536269514722 * 0.03)
    sure = b.decide(BlessingConfig(), truth, candidate, reference=reference, reference_errors={"accuracy": 0.01})
    assert sure.reasons == (
        "no worse than the linear reference 0.9500 by more than 0.02 plus 1.64 x 0.0100 (standard error of the paired "
        "difference over 60 rows): accuracy=0.9000 >= 0.9136 fails",
    )
    assert sure.reference_errors == {"accuracy": 0.01}
