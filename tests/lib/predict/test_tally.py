"""`predict.tally`: the codes of parsed rows over the training bins, their counts, and the two ways they are made
(a read of their own, and batch prediction's input pipeline through the model) giving the same tally."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib.config.skew import SkewConfig
from estimator_lib.predict import skew
from estimator_lib.predict.tally import Bins, FeatureBins
from estimator_lib.schema import CATEGORICAL, NUMERIC

NUMBERS = {"kind": NUMERIC, "missing": 0, "present": 101, "percentiles": [float(v) for v in range(101)]}


def _codes(feature: FeatureBins, values) -> list:
    """The codes of parsed values, as the check makes them: the column in TensorFlow, the codes on the host."""
    dtype = tf.float32 if feature.kind == NUMERIC else tf.string
    return feature.codes(feature.column(tf.constant(values, dtype)).numpy()).tolist()


def test_a_numeric_value_is_coded_by_its_decile_bin_and_its_place_against_the_training_range():
    f = FeatureBins.of("x", "x", NUMBERS)
    assert f.edges == (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0) and (f.low, f.high) == (0.0, 100.0)
    # missing 0; 1 + bin, bin k holding edges[k-1] < v <= edges[k]; + 10 below the minimum, + 20 above the maximum
    values = [float("nan"), 0.0, 10.0, 10.5, 90.0, 90.5, 100.0, -0.5, 100.5]
    assert _codes(f, values) == [0, 1, 1, 2, 9, 10, 10, 1 + 0 + 10, 1 + 9 + 20]
    entry = f.entry(np.bincount(_codes(f, values), minlength=f.size))
    assert entry == {
        "kind": NUMERIC,
        "missing": 1,
        "present": 8,
        "below": 1,
        "above": 1,
        "bins": [3, 1, 0, 0, 0, 0, 0, 0, 1, 3],
    }


def test_a_category_is_coded_by_its_training_index_and_any_other_is_unseen():
    f = FeatureBins.of("c", "c", {"kind": CATEGORICAL, "missing": 0, "present": 5, "counts": {"b": 3, "a": 2}})
    assert _codes(f, [b"b", b"a", b"", b"zz", b"A"]) == [1, 2, 0, 3, 3]
    entry = f.entry(np.bincount(_codes(f, [b"b", b"a", b"", b"zz", b"A"]), minlength=f.size))
    assert entry == {"kind": CATEGORICAL, "missing": 1, "present": 4, "counts": {"b": 1, "a": 1}}


def test_a_feature_training_never_saw_a_value_of_counts_missing_and_present_only():
    numeric = FeatureBins.of("x", "x", {"kind": NUMERIC, "missing": 5, "present": 0})
    categorical = FeatureBins.of("c", "c", {"kind": CATEGORICAL, "missing": 5, "present": 0, "counts": {}})
    assert _codes(numeric, [float("nan"), 3.0]) == [0, 1] and _codes(categorical, [b"", b"a"]) == [0, 1]
    assert numeric.entry(np.array([1, 1])) == {"kind": NUMERIC, "missing": 1, "present": 1}


def test_tallies_merge_by_addition_whatever_the_split():
    bins = Bins((FeatureBins.of("x", "x", NUMBERS),))
    values = np.random.default_rng(0).normal(50, 30, 1000).astype(np.float32)
    values[::7] = np.nan
    columns = bins.columns({"x": tf.constant(values)}, 1000).numpy()
    whole = bins.count(columns)
    parts = bins.count(columns[:333]).merge(bins.count(columns[333:]))
    assert whole.rows == parts.rows == 1000 and whole.counts[0].tolist() == parts.counts[0].tolist()
    assert bins.scored(whole)["features"]["x"]["missing"] == 143


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from skew_cases import trained_stage

    return trained_stage(tmp_path_factory.mktemp("tally"))


def test_batch_predictions_counted_codes_give_the_report_a_read_of_their_own_gives(trained):
    """The default check counts the codes the predict input passed through the model; the same rows read by the
    check itself (as "block" reads them before scoring) give the same figures, byte for byte."""
    from skew_cases import predict_stage, rows, write_csv

    from estimator_lib.config.stages import PredictSpec
    from estimator_lib.data.prepare import load_prepared

    scored = write_csv(str(trained[0] / "scored.csv"), rows(3000, ("red", "purple", "blue")))
    predictions = predict_stage(*trained, "tapped", PredictSpec(scored))
    tapped = skew.read_report(predictions.uri)
    assert tapped["status"] == "warned" and tapped["rows"]["scored"] == 3000 and tapped["flagged"] == ["colour"]
    encoded = sorted(
        os.path.join(d, n) for d, _, names in os.walk(predictions.uri + "-rows") for n in names if ".tfrecord" in n
    )
    prepared = load_prepared(trained[1].uri)
    read = skew.SkewCheck(prepared.profile(), SkewConfig()).start(encoded, prepared.schema, 3000).result()
    ours = read.to_dict()
    assert json.dumps(ours["features"], sort_keys=True) == json.dumps(tapped["features"], sort_keys=True)
    assert ours["rows"] == tapped["rows"]
