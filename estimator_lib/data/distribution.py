"""The distribution of a prepared split, recorded so a later run can tell how far its data drifted.

`profile.json` (written by `prepare` beside the schema, and carried by an export into the published model) holds,
for the training split: the row count and, per feature (original name), the missing values and

  * numeric: mean, standard deviation and the 0th..100th percentiles of the present values;
  * categorical: the count of each value (the `MAX_VALUES` most frequent; `other` counts the rest).

Percentiles make two profiles comparable without sharing bin edges: `estimator_lib.data.validation` bins both
on the reference's deciles. Computed on the host CPU: `prepare` builds it from what its workers encoded, chunk by
chunk (`profile_summaries` of `quantiles.profile_numbers`: exact over every value, whatever the split's size, and
no process holds them all), when every category was counted; otherwise by reading the split's TFRecords back
once (`profile_split`).

`profile_split`'s memory stays bounded whatever the split's size: its numeric statistics hold at most
`SAMPLE_ROWS` values per feature. A larger split's numeric statistics come from an evenly spaced sample (every
k-th record in shard order, k = ceil(rows / SAMPLE_ROWS), recorded as `sample_every`: every k-th present value,
the first one included); row, missing and category counts always cover every record.

The statistics do not depend on the order of the records: mean and standard deviation are exact and rounded
once (`combine.NumericStats`), percentiles come from the sorted values.

The skew check (`predict.skew`) counts the rows being scored over the bins of this profile (`predict.tally`).
"""

from __future__ import annotations

import collections
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from estimator_lib.data import quantiles
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


class ColumnProfiler:
    """Profiles a split's columns batch by batch (`add`), in bounded memory: numeric columns (float, NaN where
    missing) keep every `every`-th present value (k = ceil(rows / SAMPLE_ROWS), the first one included), categorical
    ones (bytes, b"" where missing) count every value; `numeric` and `categorical` give a column's profile entry."""

    def __init__(self, numeric: Sequence[str], categorical: Sequence[str], rows: int):
        self.rows, self.every, self.seen = rows, max(1, -(-rows // SAMPLE_ROWS)), 0
        self._numbers: Dict[str, List[np.ndarray]] = {key: [] for key in numeric}
        self._missing = {key: 0 for key in numeric}
        self._present = {key: 0 for key in numeric}
        self.counts: Dict[str, collections.Counter] = {key: collections.Counter() for key in categorical}

    def add(self, batch: Dict[str, np.ndarray], size: int) -> None:
        """Adds `size` records' columns (every numeric and categorical key's)."""
        self.seen += size
        for key, values in self._numbers.items():
            present = batch[key][~np.isnan(batch[key])]
            self._missing[key] += len(batch[key]) - len(present)
            # Every `every`-th present value of the split, the first one included.
            values.append(present[-self._present[key] % self.every :: self.every])
            self._present[key] += len(present)
        for key, counter in self.counts.items():
            counter.update(batch[key].tolist())  # counted in C, no sort

    def check(self) -> None:
        if self.seen != self.rows:
            raise AssertionError(f"profile: the split's shards hold {self.seen} records, not the {self.rows} written")

    def numeric(self, key: str) -> Dict[str, Any]:
        parts = self._numbers[key]
        column = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        return _numeric(column.astype(np.float64), self._missing[key], self.rows, self.every)

    def categorical(self, key: str) -> Dict[str, Any]:
        return _categorical(self.counts[key], self.rows)


def profile_split(files: Sequence[str], schema: Schema, rows: int) -> Dict[str, Any]:
    """The profile of the TFRecord `files` of one prepared split, which hold `rows` records."""
    profiler = ColumnProfiler([f.key for f in schema.numeric], [f.key for f in schema.categorical], rows)
    dataset = tf.data.TFRecordDataset(list(files)).batch(_BATCH).map(lambda s: tf.io.parse_example(s, _spec(schema)))
    for batch in dataset.as_numpy_iterator():
        profiler.add(batch, len(next(iter(batch.values()))))
    profiler.check()
    features = {
        f.name: profiler.numeric(f.key) if f.kind == NUMERIC else profiler.categorical(f.key) for f in schema.features
    }
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

    Returns None when the numbers were not gathered or a category count is incomplete (see `profile_summaries`).
    """
    if numbers is None:
        return None
    summary = quantiles.chunk_numbers(numbers)
    return profile_summaries(schema, quantiles.profile_numbers(lambda: iter([summary])), categories, missing, rows)


def profile_summaries(
    schema: Schema,
    numbers: Dict[int, Tuple[int, NumericStats, List[float]]],
    categories: Dict[int, collections.Counter],
    missing: Sequence[int],
    rows: int,
) -> Optional[Dict[str, Any]]:
    """`profile_split` of a split of `rows` records from the summaries of what was written into it.

    Args:
      numbers: {feature index: (present values, their statistics, their 0th..100th percentiles)} of every
        record's value (`quantiles.profile_numbers`); a numeric feature it lacks has no present value.
      categories: {feature index: Counter} of the present values; missing: per feature, the records without one.

    Returns None when a category count is incomplete (`stats` keeps only the most frequent of very many values):
    `profile_split` then reads the split back.
    """
    categories = {
        i: categories.get(i, collections.Counter()) for i, f in enumerate(schema.features) if f.kind != NUMERIC
    }
    if not all(sum(c.values()) + missing[i] == rows for i, c in categories.items()):
        return None
    features = {}
    for index, f in enumerate(schema.features):
        if f.kind == NUMERIC:
            present, stats, points = numbers.get(index, (0, NumericStats(), []))
            features[f.name] = _numeric_entry(present, rows - present, stats, points, 1)
        else:
            counts = collections.Counter({v.encode("utf-8"): n for v, n in categories[index].items()})
            counts[b""] += missing[index]  # a missing value reads back as b""
            features[f.name] = _categorical(counts, rows)
    return {"format_version": FORMAT_VERSION, "rows": rows, "features": features}


def _numeric(present: np.ndarray, missing: int, rows: int, every: int) -> Dict[str, Any]:
    """Statistics of a numeric column: `present` holds every `every`-th present value, `missing` counts the
    split's `rows` records without one."""
    points = [float(v) for v in np.percentile(present, np.arange(101))] if present.size else []
    return _numeric_entry(rows - missing, missing, NumericStats.of(present), points, every)


def _numeric_entry(present: int, missing: int, stats: NumericStats, points: List[float], every: int) -> Dict[str, Any]:
    out: Dict[str, Any] = {"kind": NUMERIC, "missing": missing, "present": present}
    if every > 1:
        out["sample_every"] = every
    if points:
        out.update(mean=stats.mean, std=stats.std, percentiles=points)
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
