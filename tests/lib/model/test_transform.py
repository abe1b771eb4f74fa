"""model/transform.py: the host-side conversion to TPU-safe tensors: dtypes, vocabulary and OOV ids, the
row markers, the label, and the parse spec's defaults for padded (empty) Examples."""

from __future__ import annotations

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib.model import transform
from estimator_lib.schema import (
    CATEGORICAL,
    INDEX_FEATURE,
    KEY_FEATURE,
    LABEL_KEY,
    NUMERIC,
    PADDING_FEATURE,
    FeatureSpec,
    LabelSpec,
    Schema,
)

BINARY = synthetic.make_schema("binary")
REGRESSION = synthetic.make_schema("regression")


def test_int_categories_are_looked_up_by_their_text():
    feature = FeatureSpec("n", "f_n", CATEGORICAL, value_type="int", vocabulary=("3", "10", "-1"), num_oov_buckets=2)
    ids = transform.categorical_ids(tf.constant([10, 3, -1, 7, 7, 0], tf.int64), feature).numpy()
    assert ids.dtype == np.int32
    assert ids[:3].tolist() == [1, 0, 2]
    assert set(ids[3:].tolist()) <= {3, 4} and ids[3] == ids[4]  # unknown values hash into the 2 OOV ids


def test_string_categories_and_missing_value():
    feature = BINARY.feature("colour")  # vocabulary red, green, blue; one OOV bucket
    ids = transform.categorical_ids(tf.constant(["blue", "red", "", "Red"]), feature)
    assert ids.dtype == tf.int32 and ids.numpy().tolist() == [2, 0, 3, 3]


def test_to_model_features_casts_and_passes_markers():
    parsed = {
        "f_x_1": tf.constant([1.5, 2.0], tf.float64),
        "f_x_2": tf.constant([0.0, -1.0]),
        "f_colour": tf.constant(["green", "purple"]),
        PADDING_FEATURE: tf.constant([0, 1], tf.int64),
        INDEX_FEATURE: tf.constant([7, 8], tf.int64),
        KEY_FEATURE: tf.constant(["k0", "k1"]),
    }
    out = transform.to_model_features(parsed, BINARY)
    assert sorted(out) == sorted(["f_x_1", "f_x_2", "f_colour", PADDING_FEATURE, INDEX_FEATURE])
    assert {k: v.dtype for k, v in out.items()} == {
        "f_x_1": tf.float32,
        "f_x_2": tf.float32,
        "f_colour": tf.int32,
        PADDING_FEATURE: tf.float32,
        INDEX_FEATURE: tf.int32,
    }
    assert out["f_colour"].numpy().tolist() == [1, 3]
    assert out[PADDING_FEATURE].numpy().tolist() == [0.0, 1.0] and out[INDEX_FEATURE].numpy().tolist() == [7, 8]


def test_a_missing_feature_is_named():
    with pytest.raises(KeyError, match="feature 'colour' \\(key 'f_colour'\\) is missing from the input tensors"):
        transform.to_model_features({"f_x_1": tf.constant([1.0]), "f_x_2": tf.constant([1.0])}, BINARY)


def test_to_model_label():
    assert transform.to_model_label({}, BINARY) is None
    classes = transform.to_model_label({LABEL_KEY: tf.constant([1, 0], tf.int64)}, BINARY)
    values = transform.to_model_label({LABEL_KEY: tf.constant([2.5], tf.float64)}, REGRESSION)
    assert classes.dtype == tf.int32 and classes.numpy().tolist() == [1, 0]
    assert values.dtype == tf.float32 and values.numpy().tolist() == [2.5]


def test_parse_spec_defaults():
    spec = transform.parse_spec(BINARY)
    assert spec["f_x_1"].default_value == 2.0 and spec["f_x_2"].default_value == -1.0  # the training means
    assert spec["f_colour"] == tf.io.FixedLenFeature([], tf.string, default_value="")
    assert spec[KEY_FEATURE].default_value == ""
    assert spec[LABEL_KEY] == tf.io.FixedLenFeature([], tf.int64, default_value=None)
    assert transform.parse_spec(BINARY, label_default=True)[LABEL_KEY].default_value == 0
    assert transform.parse_spec(REGRESSION, label_default=True)[LABEL_KEY].dtype == tf.float32
    assert LABEL_KEY not in transform.parse_spec(BINARY, with_label=False)


def test_an_empty_example_parses_only_with_the_label_default():
    empty = tf.constant([b""])
    features, label = transform.parse_batch(empty, BINARY, label_default=True)
    assert features["f_x_1"].numpy().tolist() == [2.0] and features["f_colour"].numpy().tolist() == [3]
    assert label.numpy().tolist() == [0]
    features, label = transform.parse_batch(empty, BINARY, with_label=False)
    assert label is None and features["f_x_2"].numpy().tolist() == [-1.0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="label"):
        transform.parse_batch(empty, BINARY)


def test_hashing_without_vocabulary_is_stable_in_range():
    schema = Schema(
        (
            FeatureSpec("c", "f_c", CATEGORICAL, value_type="string", num_oov_buckets=5),
            FeatureSpec("n", "f_n", NUMERIC),
        ),
        LabelSpec("y", "regression"),
    )
    out = transform.to_model_features({"f_c": tf.constant(["a", "b", "a"]), "f_n": tf.constant([1.0] * 3)}, schema)
    ids = out["f_c"].numpy().tolist()
    assert ids[0] == ids[2] and all(0 <= i < 5 for i in ids)
    assert ids == tf.strings.to_hash_bucket_fast(["a", "b", "a"], 5).numpy().tolist()
