"""The distribution of a prepared split, recorded so a later run can tell how far its data drifted.

`profile.json` (written by `prepare` beside the schema, and carried by an export into the published model) holds,
for the training split: the row count and, per feature (original name), the missing values and

  * numeric: mean, standard deviation and the 0th..100th percentiles of the present values;
  * categorical: the count of each value (the `MAX_VALUES` most frequent; `other` counts the rest).

Percentiles make two profiles comparable without sharing bin edges: `estimator_lib.data.validation` bins both
on the reference's deciles. Computed on the host CPU by reading the split's TFRecords back once.
"""

from __future__ import annotations

import collections
from typing import Any, Dict, List, Sequence

import numpy as np
import tensorflow as tf

from estimator_lib.schema import NUMERIC, Schema

PROFILE = "profile.json"
FORMAT_VERSION = 1
MAX_VALUES = 10_000
_BATCH = 8192


def _spec(schema: Schema) -> Dict[str, Any]:
    """Missing numerics parse as NaN and missing categoricals as "" (a present value is never empty)."""
    return {
        f.key: tf.io.FixedLenFeature([], tf.float32, default_value=float("nan"))
        if f.kind == NUMERIC
        else tf.io.FixedLenFeature([], tf.string, default_value="")
        for f in schema.features
    }


def profile_split(files: Sequence[str], schema: Schema) -> Dict[str, Any]:
    """The profile of the TFRecord `files` of one prepared split."""
    numbers: Dict[str, List[np.ndarray]] = {f.key: [] for f in schema.numeric}
    counts: Dict[str, collections.Counter] = {f.key: collections.Counter() for f in schema.categorical}
    rows = 0
    dataset = tf.data.TFRecordDataset(list(files)).batch(_BATCH).map(lambda s: tf.io.parse_example(s, _spec(schema)))
    for batch in dataset.as_numpy_iterator():
        rows += len(next(iter(batch.values())))
        for key, values in numbers.items():
            values.append(batch[key])
        for key, counter in counts.items():
            counter.update(batch[key].tolist())  # counted in C, no sort
    features = {}
    for f in schema.features:
        if f.kind == NUMERIC:
            column = np.concatenate(numbers[f.key]) if numbers[f.key] else np.zeros(0, np.float32)
            features[f.name] = _numeric(column.astype(np.float64))
        else:
            features[f.name] = _categorical(counts[f.key], rows)
    return {"format_version": FORMAT_VERSION, "rows": rows, "features": features}


def _numeric(column: np.ndarray) -> Dict[str, Any]:
    present = column[~np.isnan(column)]
    out: Dict[str, Any] = {"kind": NUMERIC, "missing": int(column.size - present.size), "present": int(present.size)}
    if present.size:
        out.update(
            mean=float(present.mean()),
            std=float(present.std()),
            percentiles=[float(v) for v in np.percentile(present, np.arange(101))],
        )
    return out


def _categorical(counter: collections.Counter, rows: int) -> Dict[str, Any]:
    missing = counter.pop(b"", 0)
    ranked = sorted(counter.items(), key=lambda item: (-item[1], item[0]))
    kept = {value.decode("utf-8"): int(n) for value, n in ranked[:MAX_VALUES]}
    other = sum(n for _, n in ranked[MAX_VALUES:])
    return {
        "kind": "categorical",
        "missing": int(missing),
        "present": rows - int(missing),
        "counts": kept,
        "other": other,
    }
