"""The prediction half of the skew check (`predict.predicted`): the eval rows' profile, the scored rows' counts
batch by batch and merged, and the share shift judged against its threshold and sampling noise."""

from __future__ import annotations

import numpy as np
import pytest

from estimator_lib.config.skew import SkewConfig
from estimator_lib.predict import predicted
from estimator_lib.predict.skew import SkewCheck, SkewError, SkewReport
from estimator_lib.schema import CATEGORICAL, FeatureSpec, LabelSpec, Schema

CLASSIFIER = Schema(
    (FeatureSpec("colour", "f_colour", CATEGORICAL, value_type="string"),),
    LabelSpec("species", "classification", classes=("Adelie", "Chinstrap", "Gentoo")),
)
REGRESSOR = Schema(
    (FeatureSpec("colour", "f_colour", CATEGORICAL, value_type="string"),), LabelSpec("mass", "regression")
)


def class_ids(ids) -> dict:
    return {"class_ids": np.asarray(ids, np.int64).reshape(-1, 1)}


def test_the_eval_profile_counts_the_predicted_classes_in_the_schemas_order():
    profile = predicted.eval_profile(CLASSIFIER, np.array(["Gentoo", "Adelie", "Gentoo", "Adelie", "Adelie"], object))
    assert profile == predicted.PredictionProfile("classes", ("Adelie", "Chinstrap", "Gentoo"), (3, 0, 2))
    assert profile.to_dict() == {
        "kind": "classes",
        "bins": ["Adelie", "Chinstrap", "Gentoo"],
        "counts": [3, 0, 2],
        "rows": 5,
    }
    assert predicted.PredictionProfile.from_dict(profile.to_dict()) == profile


def test_a_regressors_bins_are_the_float32_deciles_of_its_eval_predictions_and_count_them_alike():
    values = np.arange(100, dtype=np.float64) / 7  # as the predictions' JSON gives them back
    profile = predicted.eval_profile(REGRESSOR, values)
    assert profile.kind == "values" and len(profile.bins) == 9 and profile.counts == (10,) * 10
    assert all(float(np.float32(e)) == e for e in profile.bins)
    counter = profile.counter()
    counter.add({"predictions": values.astype(np.float32).reshape(-1, 1)})  # the model's own float32 outputs
    assert counter.profile() == profile  # a value on an edge falls in the same bin on both sides
    assert predicted.bin_names(profile)[0] == f"< {profile.bins[0]:.4g}" and predicted.bin_names(profile)[
        -1
    ].startswith(">= ")


def test_counts_of_parts_add_up_to_the_counts_of_the_whole():
    ids = np.random.default_rng(0).integers(0, 3, 1000)
    whole = predicted.PredictionCounter("classes", CLASSIFIER.label.classes)
    whole.add(class_ids(ids))
    merged = whole.fresh()
    for part in np.array_split(ids, 7):  # as the Beam engine's workers count their parts
        counter = whole.fresh()
        counter.add(class_ids(part))
        merged.absorb([int(c) for c in counter.counts])
    assert merged.profile() == whole.profile() and whole.profile().rows == 1000


def test_a_profile_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not a prediction profile"):
        predicted.PredictionProfile.from_dict({"kind": "classes", "bins": ["a", "b"], "counts": [1]})


def test_shares_that_moved_beyond_the_threshold_are_flagged_with_a_reading():
    reference = predicted.PredictionProfile("classes", ("Adelie", "Chinstrap", "Gentoo"), (440, 200, 360))
    same = predicted.PredictionProfile("classes", reference.bins, (450, 190, 360))
    moved = predicted.PredictionProfile("classes", reference.bins, (200, 190, 610))
    assert predicted.compare(reference, same, 0.1).breaches == ()
    flagged = predicted.compare(reference, moved, 0.1)
    assert flagged.breaches == ("share shift",) and flagged.figures["share shift"] == pytest.approx(0.25)
    assert (
        flagged.reading
        == "predicted class Gentoo: 61% of the scored rows, 36% of the eval rows the model was blessed on"
    )
    assert flagged.to_dict()["shares"]["Gentoo"] == [0.36, 0.61]


def test_few_rows_raise_the_limit_to_what_sampling_noise_reaches():
    reference = predicted.PredictionProfile("classes", ("a", "b"), (30, 37))  # 67 eval rows, as the penguins'
    moved = predicted.PredictionProfile("classes", ("a", "b"), (300, 220))  # 13 points more of "a"
    judged = predicted.compare(reference, moved, 0.1)
    assert judged.thresholds["share shift"] == pytest.approx(0.197, abs=0.005) and judged.breaches == ()
    # the same shift over many rows is beyond the noise
    assert predicted.compare(predicted.PredictionProfile("classes", ("a", "b"), (3000, 3700)), moved, 0.1).breaches


def test_the_check_warns_or_blocks_on_the_predictions_alone():
    profile = {"features": {}, "rows": 100}
    reference = predicted.PredictionProfile("classes", ("no", "yes"), (50, 50)).to_dict()
    report = SkewReport("passed", "warn", (100, 400))
    check = SkewCheck(profile, SkewConfig(), reference)
    counter = check.counter()
    counter.add(class_ids([1] * 380 + [0] * 20))
    warned = check.after_scoring(report, counter)
    assert warned.status == "warned" and warned.flagged == ()
    assert warned.summary() == (
        "warned: the predictions moved: predicted class yes: 95% of the scored rows, 50% of the eval rows the model "
        "was blessed on"
    )
    assert warned.to_dict()["predictions"]["breaches"] == ["share shift"]
    blocking = SkewCheck(profile, SkewConfig(skew="block"), reference)
    with pytest.raises(SkewError, match=r"blocked: the predictions moved: .*--set predict.max_prediction_shift="):
        blocking.after_scoring(SkewReport("passed", "block", (100, 400)), counter)
    calm = check.counter()
    calm.add(class_ids([1] * 200 + [0] * 200))
    passed = check.after_scoring(report, calm)
    assert passed.status == "passed" and passed.summary() == (
        "passed: 0 features of 400 scored rows and their predictions within their thresholds"
    )
    # nothing to compare with: no eval profile, or the check off
    assert SkewCheck(profile, SkewConfig()).counter() is None
    assert SkewCheck(profile, SkewConfig(skew="off"), reference).counter() is None
