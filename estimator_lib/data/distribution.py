"""The distribution of a prepared split, recorded so a later run can tell how far its data drifted.

`profile.json` (written by `prepare` beside the schema, and carried by an export into the published model) holds,
for the training split: the row count and, per feature (original name), the missing values and

  * numeric: mean, standard deviation and the 0th..100th percentiles of the present values;
  * categorical: the count of each value (the `MAX_VALUES` most frequent; `other` counts the rest).

Percentiles make two profiles comparable without sharing bin edges: `estimator_lib.data.validation` bins both
on the reference's deciles. Computed on the host CPU: `prepare` builds it from the values its workers encoded
(`profile_values`) when the split has at most `SAMPLE_ROWS` rows and every category was counted, otherwise by
reading the split's TFRecords back once (`profile_split`); both give the same profile.

Memory stays bounded whatever the split's size: the numeric statistics hold at most `SAMPLE_ROWS` values per
feature. A larger split's numeric statistics come from an evenly spaced sample (every k-th record in shard
order, k = ceil(rows / SAMPLE_ROWS), recorded as `sample_every`: every k-th present value, the first one
included); row, missing and category counts always cover every record.

The statistics do not depend on the order of the records: mean and standard deviation are exact and rounded
once (`combine.NumericStats`), percentiles come from the sorted values.
"""

from __future__ import annotations

import collections
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from estimator_lib.data.combine import NumericStats
from estimator_lib.schema import NUMERIC, Schema

PROFILE = "profile.json"
FORMAT_VERSION = 1
MAX_VALUES = 10_000
SAMPLE_ROWS = 1_000_000
_BATCH = 8192


def _spec(schema: Schema) -> Dict[str, Any]:
    """Missing numerics parse as NaN and missing categoricals as "" (a present value is never empty)."""
    return {
        f.key: tf.io.FixedLenFeature([], tf.float32, default_value=float("nan"))
        if f.kind == NUMERIC
        else tf.io.FixedLenFeature([], tf.string, default_value="")
        for f in schema.features
    }


def profile_split(files: Sequence[str], schema: Schema, rows: int) -> Dict[str, Any]:
    """The profile of the TFRecord `files` of one prepared split, which hold `rows` records."""
    every = max(1, -(-rows // SAMPLE_ROWS))
    numbers: Dict[str, List[np.ndarray]] = {f.key: [] for f in schema.numeric}
    missing = {f.key: 0 for f in schema.numeric}
    counts: Dict[str, collections.Counter] = {f.key: collections.Counter() for f in schema.categorical}
    seen, present_seen = 0, {f.key: 0 for f in schema.numeric}
    dataset = tf.data.TFRecordDataset(list(files)).batch(_BATCH).map(lambda s: tf.io.parse_example(s, _spec(schema)))
    for batch in dataset.as_numpy_iterator():
        seen += len(next(iter(batch.values())))
        for key, values in numbers.items():
            present = batch[key][~np.isnan(batch[key])]
            missing[key] += len(batch[key]) - len(present)
            # Every `every`-th present value of the split, the first one included.
            values.append(present[-present_seen[key] % every :: every])
            present_seen[key] += len(present)
        for key, counter in counts.items():
            counter.update(batch[key].tolist())  # counted in C, no sort
    if seen != rows:
        raise AssertionError(f"profile: the split's shards hold {seen} records, not the {rows} written")
    features = {}
    for f in schema.features:
        if f.kind == NUMERIC:
            column = np.concatenate(numbers[f.key]) if numbers[f.key] else np.zeros(0, np.float32)
            features[f.name] = _numeric(column.astype(np.float64), missing[f.key], rows, every)
        else:
            features[f.name] = _categorical(counts[f.key], rows)
    return {"format_version": FORMAT_VERSION, "rows": rows, "features": features}


def profile_values(
    schema: Schema,
    numbers: Optional[Dict[int, np.ndarray]],
    categories: Dict[int, collections.Counter],
    missing: Sequence[int],
    rows: int,
) -> Optional[Dict[str, Any]]:
    """`profile_split` of a split of `rows` records from what was written into it, without reading it back.

    Args:
      numbers: {feature index: '<f4' [rows]} each record's value, NaN where missing, in any order; None when
        they were not gathered.
      categories: {feature index: Counter} of the present values; missing: per feature, the records without one.

    Returns None when the numbers were not gathered, the split needs a sample (more than `SAMPLE_ROWS` rows)
    or a category count is incomplete (`stats` keeps only the most frequent of very many values):
    `profile_split` then reads the split back.
    """
    categories = {
        i: categories.get(i, collections.Counter()) for i, f in enumerate(schema.features) if f.kind != NUMERIC
    }
    complete = all(sum(c.values()) + missing[i] == rows for i, c in categories.items())
    if numbers is None or rows > SAMPLE_ROWS or not complete:
        return None
    features = {}
    for index, f in enumerate(schema.features):
        if f.kind == NUMERIC:
            values = numbers.get(index, np.zeros(0, np.float32))
            if len(values) != rows:
                raise AssertionError(f"profile: {len(values)} values of {f.name!r} gathered, not the {rows} written")
            present = values[~np.isnan(values)]
            features[f.name] = _numeric(present.astype(np.float64), rows - len(present), rows, 1)
        else:
            counts = collections.Counter({v.encode("utf-8"): n for v, n in categories[index].items()})
            counts[b""] += missing[index]  # a missing value reads back as b""
            features[f.name] = _categorical(counts, rows)
    return {"format_version": FORMAT_VERSION, "rows": rows, "features": features}


def _numeric(present: np.ndarray, missing: int, rows: int, every: int) -> Dict[str, Any]:
    """Statistics of a numeric column: `present` holds every `every`-th present value, `missing` counts the
    split's `rows` records without one."""
    out: Dict[str, Any] = {"kind": NUMERIC, "missing": missing, "present": rows - missing}
    if every > 1:
        out["sample_every"] = every
    if present.size:
        stats = NumericStats.of(present)
        out.update(
            mean=stats.mean,
            std=stats.std,
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
