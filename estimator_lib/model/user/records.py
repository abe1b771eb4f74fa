"""A user's TFRecords, read by their `FeatureSpec`: parsing (on the host, in the input pipeline), the padding
record, and the diagnosis that names the file, record and feature when a record does not match the spec.

Parsing never imputes: a record that lacks a feature, holds the wrong number of values (or raw bytes), or the
wrong list type, fails the stage (the one exception: a label kept in the features, `label_in_features`, reads
as zeros in prediction and serving when a record has none). TensorFlow's parse error does not say which record
failed, so on failure `record_check.first_mismatch` reads the files in Python to find the first record that does
not match, and the error names it.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import orjson
import tensorflow as tf

from estimator_lib.config.feature_spec import IMAGE, RAW, Feature, FeatureSpec
from estimator_lib.model import record_check
from estimator_lib.model.record_check import GZIP_MAGIC

_NUMPY = {"option": orjson.OPT_SERIALIZE_NUMPY}
_TF_DTYPES = {"float32": tf.float32, "int64": tf.int64, "int32": tf.int64, "bytes": tf.string}


class RecordMismatchError(ValueError):
    """A record does not match the feature spec: names the file, the record's index, the feature, what the spec
    expects and what the record holds."""


def compression(files: Sequence[str]) -> str:
    """ "GZIP" when the files are gzip-compressed (by their first bytes), "" when not; mixed is an error."""
    kinds = set()
    for path in files:
        with tf.io.gfile.GFile(path, "rb") as f:
            kinds.add("GZIP" if f.read(2) == GZIP_MAGIC else "")
    if len(kinds) > 1:
        raise ValueError(f"{list(files)}: some files are gzip-compressed and some are not; give files of one kind")
    return kinds.pop() if kinds else ""


def _parse_feature(feature: Feature, optional: bool = False):
    """The tf.io feature that parses `feature`: strict, or, when `optional`, the padding record's value for a
    record without it."""
    if feature.var_len:
        return tf.io.VarLenFeature(_TF_DTYPES[feature.dtype])
    default = _zero_values(feature) if optional else None
    if feature.decode:
        return tf.io.FixedLenFeature([], tf.string, default_value=default[0] if default else None)
    if default is not None:
        default = np.reshape(default, feature.shape).tolist()
    return tf.io.FixedLenFeature(list(feature.shape), _TF_DTYPES[feature.dtype], default_value=default)


def parse_spec(spec: FeatureSpec, features: Sequence[Feature]) -> Dict[str, object]:
    """{name: tf.io feature} for `features` of the spec: strict fixed lengths, no defaults (never imputes)."""
    return {f.name: _parse_feature(f) for f in features}


def _decode_raw(feature: Feature, value: tf.Tensor) -> tf.Tensor:
    """string [B] of raw bytes -> raw_dtype [B, *shape] (a record of another length fails the batch)."""
    decoded = tf.io.decode_raw(value, tf.as_dtype(feature.raw_dtype), little_endian=True)
    return tf.reshape(decoded, [-1, *feature.shape])


def _to_tensor(feature: Feature, value) -> tf.Tensor:
    """A parsed feature [B, ...] as the model sees it: var_len padded to its length (longer fails), images
    decoded to float32 [B, h, w, c], raw bytes to raw_dtype [B, *shape], int32 cast from the wire's int64."""
    if feature.var_len:
        length = feature.shape[0]
        check = tf.debugging.assert_less_equal(
            value.dense_shape[1],
            tf.constant(length, tf.int64),
            message=f"feature {feature.name!r}: a record holds more than its var_len length {length} values",
        )
        with tf.control_dependencies([check]):
            dense = tf.sparse.to_dense(value, default_value=tf.cast(feature.default, value.dtype))
        dense = tf.pad(
            dense, [[0, 0], [0, length - tf.shape(dense)[1]]], constant_values=tf.cast(feature.default, value.dtype)
        )
        value = tf.ensure_shape(dense, [None, length])
    elif feature.decode == RAW:
        value = _decode_raw(feature, value)
    elif feature.decode == IMAGE:
        height, width, channels = feature.shape
        decode = lambda b: tf.cast(tf.io.decode_image(b, channels=channels, expand_animations=False), tf.float32)  # noqa: E731
        images = tf.map_fn(decode, value, fn_output_signature=tf.TensorSpec([None, None, channels], tf.float32))
        value = tf.ensure_shape(images, [None, height, width, channels])
    return tf.cast(value, tf.int32) if feature.dtype == "int32" else value


def parse_batch(serialized: tf.Tensor, spec: FeatureSpec, with_label: bool):
    """string [B] -> features {name: [B, *shape]} (and the label [B, *shape] when `with_label`).

    With `spec.label_in_features` the label is one of the features, and only the features are returned; without
    `with_label` (prediction, serving) a record may then lack it, and the model gets the padding record's value
    (zeros) for it."""
    wanted = spec.model_features + ((spec.feature(spec.label),) if with_label and spec.label else ())
    wanted = tuple(dict.fromkeys(wanted))  # the label once, when it is among the features
    optional = spec.label if spec.label_in_features and not with_label else None
    parsed = tf.io.parse_example(serialized, {f.name: _parse_feature(f, f.name == optional) for f in wanted})
    tensors = {f.name: _to_tensor(f, parsed[f.name]) for f in wanted}
    for tensor in tensors.values():  # a var-len or decoded feature keeps the batch's static size (a TPU needs it)
        tensor.set_shape(tf.TensorShape([serialized.shape[0]]).concatenate(tensor.shape[1:]))
    if not (with_label and spec.label) or spec.label_in_features:
        return tensors
    label = tensors.pop(spec.label)
    return tensors, label


def _zero_values(feature: Feature) -> list:
    """The wire values of `feature` in the padding record: zeros of its length, an all-zero image, or the raw
    bytes of zeros."""
    if feature.decode == IMAGE:
        return [tf.io.encode_png(tf.zeros(feature.shape, tf.uint8)).numpy()]
    if feature.decode == RAW:
        return [bytes(feature.raw_bytes)]
    if feature.var_len:
        return []
    return [b""] if feature.dtype == "bytes" else [0] * feature.size


def _zero_value(feature: Feature) -> tf.train.Feature:
    kind = {"float_list": tf.train.FloatList, "int64_list": tf.train.Int64List, "bytes_list": tf.train.BytesList}
    return tf.train.Feature(**{feature.wire_list: kind[feature.wire_list](value=_zero_values(feature))})


def padding_record(spec: FeatureSpec) -> bytes:
    """A serialized Example that matches the spec with zero values: what pads eval and predict data to whole
    batches (its rows are marked `is_padding` and weighted out or dropped)."""
    return tf.train.Example(
        features=tf.train.Features(feature={f.name: _zero_value(f) for f in spec.features})
    ).SerializeToString()


# -- naming the record that does not match -------------------------------------------------------------------
def read_features(spec: FeatureSpec, with_label: bool) -> List[Feature]:
    features = list(spec.inputs) + ([spec.feature(spec.label)] if with_label and spec.label else [])
    return features + ([spec.feature(spec.key)] if spec.key else [])


def check_first_records(files: Sequence[str], spec: FeatureSpec, with_label: bool) -> None:
    """Checks the first record of every file against the spec before a graph is built on it: a spec of the
    wrong dtype or shape fails here, naming the feature, rather than inside the user's model."""
    found = record_check.first_mismatch(files, record_check.spec_contract(read_features(spec, with_label)), 1)
    if found is not None:
        raise RecordMismatchError(found.message())


def raise_for_records(files: Sequence[str], spec: FeatureSpec, with_label: bool, cause: Exception) -> None:
    """After a parse failure in the input pipeline: raises RecordMismatchError naming the first record that does
    not match; re-raises `cause` when every record matches (the failure was something else)."""
    found = record_check.first_mismatch(files, record_check.spec_contract(read_features(spec, with_label)))
    if found is None:
        raise cause
    raise RecordMismatchError(found.message()) from None


def read_column(files: Sequence[str], feature: Feature) -> List:
    """One scalar feature's values of every record, in file order (the prediction rows' keys, a sliced
    evaluation's values): text, ints, or floats (float32 as the nearest Python float)."""
    out: List = []
    spec = {feature.name: tf.io.FixedLenFeature([], _TF_DTYPES[feature.dtype])}
    for path in files:
        dataset = tf.data.TFRecordDataset([path], compression_type=compression([path])).batch(4096)
        for batch in dataset.map(lambda s: tf.io.parse_example(s, spec)[feature.name]).as_numpy_iterator():
            out.extend(v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v.item() for v in batch)
    return out


def as_json_value(value: np.ndarray):
    """One row's prediction tensor as JSON: nested lists; float32 numbers as the shortest text that reads back
    as the same float32; bytes as UTF-8 text (invalid bytes backslash-escaped)."""
    value = np.asarray(value)
    if value.dtype.kind in "OS":
        flat = [v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v for v in value.ravel()]
    elif value.dtype == np.float32:
        if np.isfinite(value).all():  # orjson writes float32's shortest text in one native call (NaN as null)
            listed = orjson.loads(orjson.dumps(np.ascontiguousarray(value.reshape(value.shape or (1,))), **_NUMPY))
            return listed if value.shape else listed[0]
        flat = [float(np.format_float_scientific(v, unique=True)) for v in value.ravel()]  # v: np.float32
    else:
        return value.tolist()
    return np.array(flat, dtype=object).reshape(value.shape).tolist() if value.shape else flat[0]
