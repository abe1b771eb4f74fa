"""`estimator_lib.model.user.records`: a user's records parsed strictly by their spec (var-length sequences
padded, encoded images decoded, int32 cast), the padding record, gzip detection, and the record named when one
does not match."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.model.user import records

SPEC = FeatureSpec.from_json(
    {
        "tokens": {"dtype": "int32", "shape": [4], "var_len": True, "default": 7},
        "pixels": {"dtype": "bytes", "shape": [2, 3, 1], "decode": "image"},
        "x": {"dtype": "float32", "shape": [2]},
        "id": {"dtype": "bytes", "shape": []},
        "label": {"dtype": "int64", "shape": []},
    },
    label="label",
    key="id",
)
IMAGE = np.arange(6, dtype=np.uint8).reshape(2, 3, 1) * 40


def example(tokens, x=(0.5, -1.0), image=IMAGE, label=1, key=b"a") -> bytes:
    feature = {
        "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=tokens)),
        "pixels": tf.train.Feature(bytes_list=tf.train.BytesList(value=[tf.io.encode_png(image).numpy()])),
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
        "id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[key])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_a_batch_parses_to_static_shapes_with_sequences_padded_and_images_decoded():
    features, label = records.parse_batch(tf.constant([example([1, 2]), example([3, 4, 5, 6])]), SPEC, with_label=True)
    assert sorted(features) == ["pixels", "tokens", "x"]  # the key is not the model's
    assert features["tokens"].dtype == tf.int32 and features["tokens"].numpy().tolist() == [[1, 2, 7, 7], [3, 4, 5, 6]]
    assert features["pixels"].shape == (2, 2, 3, 1) and features["pixels"].dtype == tf.float32
    np.testing.assert_array_equal(features["pixels"].numpy()[0], IMAGE.astype(np.float32))
    assert features["x"].numpy().tolist() == [[0.5, -1.0], [0.5, -1.0]] and label.numpy().tolist() == [1, 1]


def test_a_static_batch_keeps_its_size_in_every_feature_as_a_tpu_needs():
    seen = {}

    @tf.function(input_signature=[tf.TensorSpec([2], tf.string)])
    def parse(serialized):
        features, label = records.parse_batch(serialized, SPEC, with_label=True)
        seen.update({name: tensor.shape.as_list() for name, tensor in features.items()}, label=label.shape.as_list())
        return label

    parse.get_concrete_function()
    assert seen == {"tokens": [2, 4], "pixels": [2, 2, 3, 1], "x": [2, 2], "label": [2]}


def test_a_sequence_longer_than_its_length_fails_and_is_never_cut():
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"feature 'tokens': a record holds more than its var_len length 4"
    ):
        records.parse_batch(tf.constant([example([1, 2, 3, 4, 5])]), SPEC, with_label=False)


def test_the_padding_record_matches_the_spec_with_zero_values():
    features = records.parse_batch(tf.constant([records.padding_record(SPEC)]), SPEC, with_label=False)
    assert features["tokens"].numpy().tolist() == [[7, 7, 7, 7]]  # empty, padded with the default
    assert not features["pixels"].numpy().any() and features["x"].numpy().tolist() == [[0.0, 0.0]]


def test_gzip_files_are_detected_and_mixed_kinds_refused(tmp_path):
    plain, packed = str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord.gz")
    with tf.io.TFRecordWriter(plain) as w:
        w.write(example([1]))
    with tf.io.TFRecordWriter(packed, options="GZIP") as w:
        w.write(example([1]))
    assert gzip.open(packed).read(1) and (records.compression([plain]), records.compression([packed])) == ("", "GZIP")
    with pytest.raises(ValueError, match="some files are gzip-compressed and some are not"):
        records.compression([plain, packed])


@pytest.mark.parametrize(
    "record, feature, found",
    [
        (example([1, 2, 3, 4, 5]), "tokens", "5 value(s) in int64_list"),
        (example([1], x=(1.0,)), "x", "1 value(s) in float_list"),
        (example([1], image=np.zeros((3, 3, 1), np.uint8)), "pixels", "an image of shape [3, 3, 1], not [2, 3, 1]"),
        (b"\x08garbage", "(record)", "bytes that do not parse"),
    ],
)
def test_the_first_record_that_does_not_match_is_named(tmp_path, record, feature, found):
    path = str(tmp_path / "data.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as w:
        for r in (example([1]), example([2, 3]), record):
            w.write(r)
    mismatch = records.first_mismatch([path], SPEC, SPEC.features)
    assert (mismatch.path, mismatch.index, mismatch.feature, mismatch.found) == (path, 2, feature, found)
    assert records.first_mismatch([path], SPEC, SPEC.features, per_file=2) is None


def test_key_columns_and_json_values():
    assert records.as_json_value(np.array([[0.1, 1e-8]], np.float32)) == [[0.1, 1e-08]]
    assert records.as_json_value(np.array([b"a", b"\xff"])) == ["a", "\\xff"]
    assert records.as_json_value(np.float32(0.3)) == 0.3 and records.as_json_value(np.array(3)) == 3


def test_a_key_column_is_read_in_file_order(tmp_path):
    paths = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord.gz")]
    for path, keys, options in ((paths[0], [b"r0", b"r1"], None), (paths[1], ["ключ".encode(), b"\xff"], "GZIP")):
        with tf.io.TFRecordWriter(path, options=options) as w:
            for key in keys:
                w.write(example([1], key=key))
    assert records.read_column(paths, SPEC.feature("id")) == ["r0", "r1", "ключ", "\\xff"]


def test_a_scalar_columns_values_keep_their_type(tmp_path):
    spec = FeatureSpec.from_json({"w": {"dtype": "float32", "shape": []}, "n": {"dtype": "int64", "shape": []}})
    path = str(tmp_path / "r.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for weight, count in ((0.25, 3), (1.5, -2)):
            feature = {
                "w": tf.train.Feature(float_list=tf.train.FloatList(value=[weight])),
                "n": tf.train.Feature(int64_list=tf.train.Int64List(value=[count])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    assert records.read_column([path], spec.feature("w")) == [0.25, 1.5]
    assert records.read_column([path], spec.feature("n")) == [3, -2]
    assert [type(v) for v in records.read_column([path], spec.feature("n"))] == [int, int]


def test_float32_predictions_are_their_shortest_text_for_every_bit_pattern_and_shape():
    """The native conversion gives what a per-value shortest float32 format gives, over random bit patterns
    (subnormals and extremes included), in every shape; non-finite values keep the per-value path."""
    patterns = np.random.default_rng(5).integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    values = patterns.view(np.float32)
    values = values[np.isfinite(values)]
    per_value = [float(np.format_float_scientific(v, unique=True)) for v in values]
    native = records.as_json_value(values)
    assert [repr(v) for v in native] == [repr(v) for v in per_value]
    assert records.as_json_value(values[:6].reshape(2, 3)) == [per_value[:3], per_value[3:6]]
    assert records.as_json_value(np.zeros((2, 0), np.float32)) == [[], []]
    assert repr(records.as_json_value(np.float32(-0.0))) == "-0.0"
    with_nan = records.as_json_value(np.array([0.1, np.nan, np.inf], np.float32))
    assert with_nan[0] == 0.1 and np.isnan(with_nan[1]) and with_nan[2] == float("inf")
