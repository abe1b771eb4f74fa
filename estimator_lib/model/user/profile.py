"""The training profile of a user's TFRecords: what the skew check (`predict.skew`) compares scored records with.

The columns profiled (`candidates`), per input feature of the spec (not the label, not the key):

  * a scalar int64, int32 or float32 feature (shape [], not decoded): its value, numeric, under its name;
  * a scalar bytes feature: its value, categorical, under its name, when the train split holds at most
    `MAX_VALUES` distinct values, each UTF-8 text of at most `CATEGORY_BYTES` bytes; otherwise (ids, blobs) the
    size of its value in bytes, numeric, as `bytes(NAME)`;
  * a `var_len` feature: the number of values a record holds, numeric, as `len(NAME)`; a record with none
    counts as missing it;
  * a fixed-length rank-1 integer feature (token ids, masks: a sequence padded with zeros): the length up to
    its last non-zero value, numeric, as `len(NAME)`; a record of zeros only counts as missing it;
  * an encoded image (`decode: "image"`): the size of its bytes, numeric, as `bytes(NAME)`.

Any other fixed-shape tensor (floats, images as values, `decode: "raw"`) is not profiled: the spec fixes how many
values it holds, and a record that holds another number fails its parse. The profile is the built-in families' format
(`data.distribution`, one entry per column: missing, present, percentiles or category counts), made by its
`ColumnProfiler` from one read of the train split; the scored records are counted over its bins by the same
columns (`values`), so both sides read a record the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Sequence, Tuple

import tensorflow as tf

from estimator_lib.config.feature_spec import IMAGE, FeatureSpec
from estimator_lib.data.distribution import FORMAT_VERSION, MAX_VALUES, ColumnProfiler
from estimator_lib.model.user import records
from estimator_lib.schema import NUMERIC

CATEGORICAL = "categorical"
# What a column measures of its feature: its value, its number of values, its length before the padding zeros,
# the size of its bytes.
VALUE, LENGTH, PADDED, SIZE = "value", "length", "padded length", "size"
CATEGORY_BYTES = 256  # a scalar bytes value longer than this is not read as a category
_BATCH = 4096
_WIRE = {"float32": tf.float32, "int64": tf.int64, "int32": tf.int64, "bytes": tf.string}


@dataclasses.dataclass(frozen=True)
class RecordColumn:
    """One profiled column of a user's records.

    Attributes:
      name: its name in the profile and the skew report (the feature's, `len(NAME)` or `bytes(NAME)`).
      key: the feature it is read from. kind: "numeric" or "categorical". measure: VALUE, LENGTH, PADDED or SIZE.
      dtype: the feature's spec dtype.
    """

    name: str
    key: str
    kind: str
    measure: str
    dtype: str

    def values(self, parsed: tf.RaggedTensor) -> tf.Tensor:
        """[rows]: a numeric column's float32 values (NaN where missing), a categorical one's text ("" where
        missing), from the feature parsed as a ragged list (`parse_spec`)."""
        lengths = tf.cast(parsed.row_lengths(), tf.int64)
        present = lengths > 0
        nan = tf.fill(tf.shape(lengths), float("nan"))
        if self.measure == LENGTH:
            return tf.where(present, tf.cast(lengths, tf.float32), nan)
        if self.measure == PADDED:
            dense = parsed.to_tensor()
            positions = tf.range(1, tf.shape(dense, out_type=tf.int64)[1] + 1)
            trimmed = tf.reduce_max(tf.where(dense != 0, positions[tf.newaxis, :], 0), axis=1)
            return tf.where(trimmed > 0, tf.cast(trimmed, tf.float32), nan)
        first = parsed.to_tensor(shape=[None, 1])[:, 0]  # a row without a value gives the dtype's zero or ""
        if self.kind == CATEGORICAL:
            return first
        if self.measure == SIZE:
            return tf.where(present, tf.cast(tf.strings.length(first), tf.float32), nan)
        return tf.where(present, tf.cast(first, tf.float32), nan)


def candidates(spec: FeatureSpec) -> Tuple[RecordColumn, ...]:
    """Every column a spec's records may be profiled by (a scalar bytes feature gives two: its value and its size;
    the profile keeps one)."""
    out = []
    for f in spec.inputs:
        if f.name in spec.scalars:
            if f.dtype == "bytes":
                out.append(RecordColumn(f.name, f.name, CATEGORICAL, VALUE, f.dtype))
                out.append(RecordColumn(f"bytes({f.name})", f.name, NUMERIC, SIZE, f.dtype))
            else:
                out.append(RecordColumn(f.name, f.name, NUMERIC, VALUE, f.dtype))
        elif f.var_len:
            out.append(RecordColumn(f"len({f.name})", f.name, NUMERIC, LENGTH, f.dtype))
        elif len(f.shape) == 1 and f.dtype in ("int64", "int32") and not f.decode:
            out.append(RecordColumn(f"len({f.name})", f.name, NUMERIC, PADDED, f.dtype))
        elif f.decode == IMAGE:
            out.append(RecordColumn(f"bytes({f.name})", f.name, NUMERIC, SIZE, f.dtype))
    return tuple(out)


def profiled(spec: FeatureSpec, training: Mapping[str, Any]) -> Tuple[RecordColumn, ...]:
    """The columns `training` (a profile of the spec's records) holds, in spec order."""
    return tuple(c for c in candidates(spec) if c.name in training["features"])


def parse_spec(columns: Sequence[RecordColumn]) -> Dict[str, Any]:
    """Each feature the columns read, as a ragged list of its wire dtype (any number of values parses)."""
    return {c.key: tf.io.RaggedFeature(_WIRE[c.dtype], row_splits_dtype=tf.int64) for c in columns}


def profile_records(files: Sequence[str], spec: FeatureSpec, rows: int) -> Dict[str, Any]:
    """The profile of the `rows` records of `files` (a prepared train split), in `data.distribution`'s format."""
    columns = candidates(spec)
    numeric = [c.name for c in columns if c.kind == NUMERIC]
    categories = [c.name for c in columns if c.kind == CATEGORICAL]
    profiler = ColumnProfiler(numeric, categories, rows)
    parse_as = parse_spec(columns)

    @tf.autograph.experimental.do_not_convert  # plain TF calls
    def parse(serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
        parsed = tf.io.parse_example(serialized, parse_as) if parse_as else {}
        return {"rows": tf.size(serialized), **{c.name: c.values(parsed[c.key]) for c in columns}}

    too_long = set()
    for path in files:
        dataset = tf.data.TFRecordDataset([path], compression_type=records.compression([path])).batch(_BATCH)
        for batch in dataset.map(parse).as_numpy_iterator():
            size = int(batch.pop("rows"))
            for name in categories:
                if name in profiler.counts and max((len(v) for v in batch[name]), default=0) > CATEGORY_BYTES:
                    too_long.add(name)
            profiler.add(batch, size)
            for name in list(profiler.counts):
                if name in too_long or len(profiler.counts[name]) > MAX_VALUES + 1:  # + 1: b"" is missing
                    too_long.add(name)
                    del profiler.counts[name]  # not a category: its size is profiled
    profiler.check()
    features: Dict[str, Any] = {}
    for column in columns:
        if column.kind == CATEGORICAL:
            if column.name in profiler.counts and _text(profiler.counts[column.name]):
                features[column.name] = profiler.categorical(column.name)
        elif column.measure != SIZE or column.key not in spec.scalars or column.key not in features:
            features[column.name] = profiler.numeric(column.name)
    return {"format_version": FORMAT_VERSION, "rows": rows, "features": features}


def _text(counts: Mapping[bytes, int]) -> bool:
    try:
        for value in counts:
            value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
