"""`estimator_lib.model.user.records`: a user's records parsed strictly by their spec (var-length sequences
padded, encoded images and raw bytes decoded, int32 cast, a label kept in the features), the padding record, gzip
detection, and the record named when one does not match."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.model import record_check
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
    mismatch = record_check.first_mismatch([path], record_check.spec_contract(SPEC.features))
    assert (mismatch.path, mismatch.index, mismatch.feature, mismatch.found) == (path, 2, feature, found)
    assert record_check.first_mismatch([path], record_check.spec_contract(SPEC.features), per_file=2) is None


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


RAW_SPEC = FeatureSpec.from_json(
    {
        "image_raw": {"dtype": "bytes", "shape": [2, 3], "decode": "raw", "raw_dtype": "uint8"},
        "weights": {"dtype": "bytes", "shape": [2], "decode": "raw", "raw_dtype": "float32"},
        "label": {"dtype": "int64", "shape": []},
    },
    label="label",
)


WEIGHTS = np.array([0.25, -2.0], "<f4")  # little-endian, as decode_raw reads them


def raw_example(pixels: bytes, weights=WEIGHTS, label=3) -> bytes:
    feature = {
        "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[pixels])),
        "weights": tf.train.Feature(bytes_list=tf.train.BytesList(value=[weights.tobytes()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_raw_bytes_decode_to_their_dtype_and_shape_and_the_padding_record_holds_zero_bytes(tmp_path):
    pixels = bytes([0, 1, 2, 253, 254, 255])
    features, label = records.parse_batch(tf.constant([raw_example(pixels)] * 2), RAW_SPEC, with_label=True)
    assert features["image_raw"].dtype == tf.uint8 and features["image_raw"].shape == (2, 2, 3)
    assert features["image_raw"].numpy()[1].tolist() == [[0, 1, 2], [253, 254, 255]]
    assert features["weights"].dtype == tf.float32 and features["weights"].numpy().tolist() == [[0.25, -2.0]] * 2
    assert label.numpy().tolist() == [3, 3]
    padding = records.parse_batch(tf.constant([records.padding_record(RAW_SPEC)]), RAW_SPEC, with_label=False)
    assert padding["image_raw"].numpy().tolist() == [[[0, 0, 0], [0, 0, 0]]]
    assert padding["weights"].numpy().tolist() == [[0.0, 0.0]]
    path = str(tmp_path / "padding.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        w.write(records.padding_record(RAW_SPEC))
    assert (
        record_check.first_mismatch([path], record_check.spec_contract(RAW_SPEC.features)) is None
    )  # 6 and 8 bytes of zeros


def test_raw_bytes_of_another_length_are_named_with_the_length_expected(tmp_path):
    path = str(tmp_path / "raw.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for record in (raw_example(bytes(6)), raw_example(bytes(6), np.zeros(3, "<f4"))):
            w.write(record)
    mismatch = record_check.first_mismatch([path], record_check.spec_contract(RAW_SPEC.features))
    assert mismatch.message() == (
        f"{path}: record 1: feature 'weights': expected 1 value in bytes_list of 8 bytes (2 float32 value(s), "
        "shape [2], decode raw), found 1 value in bytes_list of 12 bytes"
    )
    with pytest.raises(tf.errors.InvalidArgumentError):  # the pipeline's failure, which `first_mismatch` names
        records.parse_batch(tf.constant([raw_example(bytes(5))]), RAW_SPEC, with_label=False)


KEPT = FeatureSpec.from_json(
    {
        "features": {"x": {"dtype": "float32", "shape": [2]}, "label": {"dtype": "int32", "shape": [2]}},
        "label_in_features": True,
    },
    label="label",
)


def kept_example(label=None) -> bytes:
    feature = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.5, 2.5]))}
    if label is not None:
        feature["label"] = tf.train.Feature(int64_list=tf.train.Int64List(value=label))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_a_label_kept_in_the_features_is_one_of_them_and_reads_as_zeros_where_prediction_records_lack_it():
    trained = records.parse_batch(tf.constant([kept_example([4, 5])]), KEPT, with_label=True)
    assert isinstance(trained, dict) and sorted(trained) == ["label", "x"]  # no separate labels
    assert trained["label"].dtype == tf.int32 and trained["label"].numpy().tolist() == [[4, 5]]
    predicted = records.parse_batch(tf.constant([kept_example([4, 5]), kept_example()]), KEPT, with_label=False)
    assert predicted["label"].numpy().tolist() == [[4, 5], [0, 0]] and predicted["label"].shape == (2, 2)
    with pytest.raises(tf.errors.InvalidArgumentError):  # training and evaluation never impute it
        records.parse_batch(tf.constant([kept_example()]), KEPT, with_label=True)
