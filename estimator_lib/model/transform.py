"""Host-side conversion of parsed features into the tensors the TPU computation may receive.

Runs on the host CPU, inside the input pipeline (training, evaluation, prediction) and inside the serving
input receiver (export). What leaves here is TPU-safe: numerics are float32 [B], categoricals are int32 ids
[B] (vocabulary lookup happens here, because string tensors cannot enter a TPU computation), the label is
int32 [B] (classification) or float32 [B] (regression). TPUs have no int64 or string support in XLA for these
ops, so nothing of either type crosses this boundary.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import tensorflow as tf

from estimator_lib.schema import (
    CLASSIFICATION,
    INDEX_FEATURE,
    KEY_FEATURE,
    LABEL_KEY,
    NUMERIC,
    PADDING_FEATURE,
    FeatureSpec,
    Schema,
)

Tensor = tf.Tensor


def categorical_ids(values: Tensor, feature: FeatureSpec) -> Tensor:
    """Maps categorical values (string, or int64 converted to text) to int32 ids in [0, num_buckets).

    Known values get their vocabulary index; unknown and missing ("") values hash into the
    `num_oov_buckets` ids after the vocabulary.
    """
    if values.dtype != tf.string:
        values = tf.strings.as_string(values)
    if not feature.vocabulary:
        return tf.cast(tf.strings.to_hash_bucket_fast(values, feature.num_oov_buckets), tf.int32)
    table = tf.lookup.StaticVocabularyTable(
        tf.lookup.KeyValueTensorInitializer(
            keys=tf.constant(feature.vocabulary, dtype=tf.string),
            values=tf.range(len(feature.vocabulary), dtype=tf.int64),
        ),
        num_oov_buckets=feature.num_oov_buckets,
    )
    return tf.cast(table.lookup(values), tf.int32)


def to_model_features(parsed: Mapping[str, Tensor], schema: Schema) -> Dict[str, Tensor]:
    """Converts parsed feature tensors to TPU-safe model features.

    Args:
      parsed: at least every schema feature key; numerics float32 [B], categoricals string or int64 [B].
        `is_padding` (float32 [B]) and `example_index` (int32/int64 [B]) are passed through when present.
      schema: the feature schema.

    Returns:
      {feature key: float32 [B] or int32 [B]} plus `is_padding` float32 [B] / `example_index` int32 [B].
    """
    out: Dict[str, Tensor] = {}
    for f in schema.features:
        if f.key not in parsed:
            raise KeyError(f"feature {f.name!r} (key {f.key!r}) is missing from the input tensors")
        value = parsed[f.key]
        out[f.key] = tf.cast(value, tf.float32) if f.kind == NUMERIC else categorical_ids(value, f)
    if PADDING_FEATURE in parsed:
        out[PADDING_FEATURE] = tf.cast(parsed[PADDING_FEATURE], tf.float32)
    if INDEX_FEATURE in parsed:
        out[INDEX_FEATURE] = tf.cast(parsed[INDEX_FEATURE], tf.int32)
    return out


def impute_numerics(parsed: Mapping[str, Tensor], schema: Schema) -> Dict[str, Tensor]:
    """`parsed` with each numeric feature's NaN (a missing value parsed as NaN) replaced by the default
    `parse_spec` gives a missing value (the schema's mean): the model sees what it would have seen."""
    out = dict(parsed)
    for f in schema.features:
        if f.kind == NUMERIC and f.key in out:
            out[f.key] = tf.where(tf.math.is_nan(out[f.key]), tf.constant(f.mean, tf.float32), out[f.key])
    return out


def to_model_label(parsed: Mapping[str, Tensor], schema: Schema) -> Optional[Tensor]:
    """The label as int32 [B] class index (classification) or float32 [B] value (regression), if parsed."""
    if LABEL_KEY not in parsed:
        return None
    dtype = tf.int32 if schema.label.task == CLASSIFICATION else tf.float32
    return tf.cast(parsed[LABEL_KEY], dtype)


def parse_batch(
    serialized: Tensor, schema: Schema, with_label: bool = True, label_default: bool = False
) -> Tuple[Dict[str, Tensor], Optional[Tensor]]:
    """Vectorised parse of a [B] batch of serialized Examples into (model features, label or None)."""
    spec = parse_spec(schema, with_label=with_label, label_default=label_default)
    parsed = tf.io.parse_example(serialized, spec)
    return to_model_features(parsed, schema), to_model_label(parsed, schema)


def parse_spec(schema: Schema, with_label: bool = True, label_default: bool = False) -> Dict[str, Any]:
    """The `tf.io.parse_example` spec for prepared TFRecords.

    Args:
      with_label: include the label.
      label_default: give the label a default (0) so an empty serialized Example parses; eval and predict
        pad their last batch with such empty Examples.
    """
    spec: Dict[str, Any] = {KEY_FEATURE: tf.io.FixedLenFeature([], tf.string, default_value="")}
    for f in schema.features:
        if f.kind == NUMERIC:
            spec[f.key] = tf.io.FixedLenFeature([], tf.float32, default_value=f.mean)
        else:
            spec[f.key] = tf.io.FixedLenFeature([], tf.string, default_value="")
    if with_label:
        dtype = tf.int64 if schema.label.task == CLASSIFICATION else tf.float32
        default = (0 if dtype == tf.int64 else 0.0) if label_default else None
        spec[LABEL_KEY] = tf.io.FixedLenFeature([], dtype, default_value=default)
    return spec
