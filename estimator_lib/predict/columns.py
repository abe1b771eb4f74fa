"""The columns of an output row besides the model's: the key and the passthrough columns a user asks for.

Resolving them (`passthrough_columns`) is plain Python against the schema; reading them (`host_parse_fn`,
`read_host_columns`) is a tf.data pass over the records on the host CPU, never the TPU: keys and passthrough
values are strings or may be missing, which a TPU computation cannot carry.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Sequence, Tuple

import tensorflow as tf

from estimator_lib.predict.origins import ORIGIN_FIELDS
from estimator_lib.schema import CLASSIFICATION, KEY_FEATURE, LABEL_KEY, NUMERIC, Schema

# The output row's own fields: a passthrough column may not take one of these names.
KEY_FIELD = "key"
CLASSIFICATION_FIELDS = ("class", "class_id", "probabilities")
REGRESSION_FIELDS = ("value",)


@dataclasses.dataclass(frozen=True)
class Column:
    """A passthrough column: its original name, the record feature holding it and how to render it.

    Attributes:
      name: the column's original name (the output field's name).
      feature: the key of the feature in the tf.train.Example that holds it.
      render: how its values are written: "float" (a JSON number), "string" (a JSON string), "int_text" (an
        integer category, stored as text, as a JSON number), "class_name" (a label id as its class name) or
        "key" (the key's text).
    """

    name: str
    feature: str
    render: str


def passthrough_columns(schema: Schema, names: Sequence[str]) -> Tuple[Column, ...]:
    """Resolves the requested passthrough columns (original names) against the schema.

    Raises:
      ValueError: a name not in the schema, one that is an output field's, or one listed twice.
    """
    known = _schema_columns(schema)
    outputs = CLASSIFICATION_FIELDS if schema.label.task == CLASSIFICATION else REGRESSION_FIELDS
    reserved = {KEY_FIELD, *ORIGIN_FIELDS, *outputs}
    columns = []
    for name in names:
        if name not in known:
            raise ValueError(
                f"passthrough column {name!r} is not in the schema; use original column names from: {sorted(known)}"
            )
        if name in reserved:
            raise ValueError(
                f"passthrough column {name!r} collides with the output field of the same name "
                f"{sorted(reserved)}; leave it out (the key and the row's input file and line or record are always "
                "written)"
            )
        columns.append(known[name])
    if len({c.name for c in columns}) != len(columns):
        raise ValueError(f"passthrough={list(names)} lists a column twice")
    return tuple(columns)


def _schema_columns(schema: Schema) -> Dict[str, Column]:
    """Every column that can pass through, by original name: the features, the label, the key column."""
    known: Dict[str, Column] = {}
    for f in schema.features:
        render = "float" if f.kind == NUMERIC else ("int_text" if f.value_type == "int" else "string")
        known[f.name] = Column(f.name, f.key, render)
    label_render = "class_name" if schema.label.task == CLASSIFICATION else "float"
    known[schema.label.name] = Column(schema.label.name, LABEL_KEY, label_render)
    if schema.key_column:
        known[schema.key_column] = Column(schema.key_column, KEY_FEATURE, "key")
    return known


def host_parse_fn(columns: Sequence[Column], schema: Schema) -> Callable[[tf.Tensor], Dict[str, Any]]:
    """tf.data map function: serialized [B] -> {KEY_FEATURE: string [B], column: (value [B], present bool [B])}.

    Passthrough values are read without imputation: a missing value stays missing (null in the output).
    """
    dtypes = {"float": tf.float32, "string": tf.string, "int_text": tf.string, "key": tf.string}
    label_dtype = tf.int64 if schema.label.task == CLASSIFICATION else tf.float32
    dtypes["class_name"] = label_dtype
    spec: Dict[str, Any] = {KEY_FEATURE: tf.io.FixedLenFeature([], tf.string, default_value="")}
    for c in columns:
        spec.setdefault(c.feature, tf.io.RaggedFeature(dtypes[c.render]))

    def parse(serialized: tf.Tensor) -> Dict[str, Any]:
        parsed = tf.io.parse_example(serialized, spec)
        out: Dict[str, Any] = {KEY_FEATURE: parsed[KEY_FEATURE]}
        for c in columns:
            value = parsed[c.feature]
            if c.feature == KEY_FEATURE:
                out[c.name] = (value, tf.ones_like(value, tf.bool))
            else:
                out[c.name] = (value.to_tensor(shape=[None, 1])[:, 0], value.row_lengths() > 0)
        return out

    return parse


def read_host_columns(
    files: List[str], columns: Sequence[Column], schema: Schema, batch_size: int, start: int = 0
) -> tf.data.Dataset:
    """The second host-side read: keys and passthrough columns of the same records, in the same order,
    from record `start` on, `batch_size` rows per element (the last may be short)."""
    dataset = tf.data.TFRecordDataset(files).skip(start).batch(batch_size)
    return dataset.map(host_parse_fn(columns, schema), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
