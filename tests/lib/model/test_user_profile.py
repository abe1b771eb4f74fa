"""A user's records profiled by their feature spec (`model.user.profile`) and the skew check over them: scalar
values (a bytes scalar as categories, or by its size when it holds ids or blobs), the lengths of var_len and
zero-padded sequences, records without a sequence counted as missing; held-out records flag nothing, and a shift,
a new category and a half-missing sequence are flagged, worst first, "block" raising before anything is scored."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from skew_cases import COLOURS, USER_SPEC, user_records

from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.config.skew import SkewConfig
from estimator_lib.model.user.profile import candidates, profile_records
from estimator_lib.predict import skew
from estimator_lib.predict.tally import Bins


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    path = user_records(str(tmp_path_factory.mktemp("train") / "train.tfrecord"), 3000, seed=0)
    return profile_records([path], USER_SPEC, 3000)


def test_the_profile_reads_scalars_sizes_and_sequence_lengths(training):
    features = training["features"]
    assert sorted(features) == ["bytes(blob)", "colour", "count", "len(ids)", "len(tokens)", "x"]
    assert [c.name for c in candidates(USER_SPEC)][:2] == ["x", "count"]  # the label, the key, pixels: not profiled
    assert features["colour"]["kind"] == "categorical" and set(features["colour"]["counts"]) == set(COLOURS)
    assert features["colour"]["missing"] == 0 and features["colour"]["present"] == 3000
    assert features["bytes(blob)"]["kind"] == "numeric"  # 300 to 400 random bytes: a size, not a category
    assert 300 <= features["bytes(blob)"]["percentiles"][0] <= features["bytes(blob)"]["percentiles"][-1] < 400
    assert features["len(tokens)"]["percentiles"][0] == 1 and features["len(tokens)"]["percentiles"][-1] == 8
    assert features["len(ids)"]["percentiles"][0] == 1 and features["len(ids)"]["percentiles"][-1] == 6
    assert abs(features["x"]["mean"] - 10.0) < 0.2 and training["rows"] == 3000


def _report(training, path, mode="warn"):
    check = skew.SkewCheck(training, SkewConfig(skew=mode))
    return check.start([path], USER_SPEC, None).result()


def test_held_out_records_flag_nothing(training, tmp_path):
    for seed in range(1, 6):
        report = _report(training, user_records(str(tmp_path / f"held-{seed}.tfrecord"), 700, seed=seed))
        assert report.status == "passed", report.summary()
        assert len(report.features) == 6


def test_a_shift_a_new_category_and_a_half_missing_sequence_are_flagged_worst_first(training, tmp_path):
    path = user_records(str(tmp_path / "skewed.tfrecord"), 700, seed=9, shift=2.0, new_colour=0.3, no_tokens=0.5)
    report = _report(training, path)
    assert report.status == "warned"
    assert sorted(f.feature for f in report.flagged) == ["colour", "len(tokens)", "x"]
    severities = [f.severity for f in report.flagged]
    assert severities == sorted(severities, reverse=True)
    readings = {f.feature: f.reading for f in report.flagged}
    assert "never seen in training" in readings["colour"]
    assert "of rows are missing it (0% in training)" in readings["len(tokens)"]
    with pytest.raises(skew.SkewError, match="No prediction was published"):
        _report(training, path, "block")


def test_gzip_records_are_counted_as_the_plain_ones(training, tmp_path):
    path = user_records(str(tmp_path / "plain.tfrecord"), 200, seed=3)
    zipped = str(tmp_path / "zipped.tfrecord.gz")
    with tf.io.TFRecordWriter(zipped, options="GZIP") as writer:
        for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
            writer.write(record)
    bins = Bins.of(training, USER_SPEC)
    plain, gz = bins.tally([path]), bins.tally([zipped], "GZIP")
    assert plain.rows == gz.rows == 200
    assert all(np.array_equal(a, b) for a, b in zip(plain.counts, gz.counts))


def test_a_spec_with_nothing_the_check_reads_is_reported_skipped(tmp_path):
    spec = FeatureSpec.from_json(
        {"image": {"dtype": "float32", "shape": [2, 2]}, "label": {"dtype": "int64", "shape": []}}, "label", None
    )
    path = str(tmp_path / "images.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        features = {
            "image": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5] * 4)),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1])),
        }
        writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
    profile = profile_records([path], spec, 1)
    assert profile["features"] == {}
    report = skew.SkewCheck(profile, SkewConfig()).start([path], spec, 1).result()
    assert report.status == "skipped" and "a sequence's length" in report.why
    assert os.path.exists(path)
