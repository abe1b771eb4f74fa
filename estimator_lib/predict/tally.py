"""The skew check's summary of the rows being scored: their counts over the training profile's bins. Host CPU.

The training profile (`data.distribution`) fixes the bins (`Bins.of`):

  * numeric: the training deciles' distinct values cut the present values into PSI's bins, and the training
    [min, max] tells the values outside the training range;
  * categorical: the training categories (the profile's `MAX_VALUES` most frequent); a present value that is none
    of them is unseen.

Each row gets one code per feature: 0 for a missing value; numeric, 1 + its bin + (bins) x (0 inside the training
range, 1 below it, 2 above it); categorical, 1 + the training category's index, or 1 + the number of categories
for an unseen value. The tally is each feature's histogram of codes (`Bins.count`), so it merges by addition
(`Tally.merge`): chunks, files, prediction batches and Beam's workers give the same tally, and the same skew.json
bytes, in any order. Where the rows are parsed, `Bins.columns` turns them into one float32 [rows, features] matrix:
a numeric feature's value (NaN when missing), a categorical feature's code (a string cannot cross a TPU; the
lookup is TensorFlow's); the host codes the numbers (`FeatureBins.numeric_codes`, NumPy) and counts. The rows are
parsed

  * by batch prediction's own input pipeline (`inputs.predict_input_fn_builder`), which passes the matrix through
    the model beside the predictions (`CODES_FEATURE`); the host counts the real rows' as it writes them
    (`CodeCounter`): the check costs no second read;
  * or by a read of their own (`Bins.tally`, 64k records at a time): the "block" check before scoring, Beam's
    workers, a SavedModel's scoring.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.data.validation import decile_edges
from estimator_lib.model.user.profile import RecordColumn, parse_spec, profiled
from estimator_lib.schema import CODES_FEATURE, NUMERIC, Schema

CHUNK_ROWS = 1 << 16  # records parsed at a time by `Bins.tally`
INSIDE, BELOW, ABOVE = 0, 1, 2  # where a numeric value lies against the training [min, max]


@dataclasses.dataclass(frozen=True)
class FeatureBins:
    """One feature's bins, from its training profile entry.

    Attributes:
      name: the column's original name (the profile's key). key: its key in the encoded records.
      kind: "numeric" or "categorical".
      edges: numeric: the training deciles' distinct values (bin k holds edges[k-1] < v <= edges[k]); empty when
        the training split had no present value. low, high: the training minimum and maximum.
      categories: categorical: the training categories, in the profile's order.
      record: a user's records: the column of them it is (`model.user.profile`); None: an encoded row's feature.
    """

    name: str
    key: str
    kind: str
    edges: Tuple[float, ...] = ()
    low: float = 0.0
    high: float = 0.0
    categories: Tuple[str, ...] = ()
    record: Optional[RecordColumn] = None

    @classmethod
    def of(cls, name: str, key: str, old: Mapping[str, Any]) -> "FeatureBins":
        if old["kind"] != NUMERIC:
            return cls(name, key, old["kind"], categories=tuple(old["counts"]))
        points = old.get("percentiles") or []
        if not points:
            return cls(name, key, NUMERIC)
        edges = decile_edges(points)
        return cls(name, key, NUMERIC, tuple(float(e) for e in edges), float(points[0]), float(points[-1]))

    @property
    def bins(self) -> int:
        """Numeric: PSI's bins (0 without training values)."""
        return len(self.edges) + 1 if self.edges else 0

    @property
    def size(self) -> int:
        """The number of codes."""
        if self.kind != NUMERIC:
            return 2 + len(self.categories)
        return 1 + 3 * self.bins if self.edges else 2

    def column(self, values: tf.Tensor) -> tf.Tensor:
        """float32 [B]: a parsed numeric column as it is (NaN for missing); a parsed categorical column's codes
        (string, "" for missing)."""
        if self.kind == NUMERIC:
            return values
        if not self.categories:
            return tf.where(tf.equal(values, ""), 0.0, 1.0)
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.categories, tf.string), tf.range(1.0, len(self.categories) + 1.0)
            ),
            default_value=float(len(self.categories) + 1),
        )
        return tf.where(tf.equal(values, ""), 0.0, table.lookup(values))

    def numeric_codes(self, values: np.ndarray) -> np.ndarray:
        """The codes of numeric values (NaN for missing)."""
        missing = np.isnan(values)
        if not self.edges:
            return (~missing).astype(np.int64)
        x = values.astype(np.float64)
        bin_ = np.searchsorted(np.asarray(self.edges), x, side="left")  # edges[k-1] < x <= edges[k]
        where = np.where(x < self.low, BELOW, np.where(x > self.high, ABOVE, INSIDE))
        return np.where(missing, 0, 1 + bin_ + self.bins * where)

    def codes(self, column: np.ndarray) -> np.ndarray:
        """The codes of a `column` matrix's column."""
        return self.numeric_codes(column) if self.kind == NUMERIC else column.astype(np.int64)

    def entry(self, counts: np.ndarray) -> Dict[str, Any]:
        """The scored side of `skew.compare` from this feature's code counts: {"kind", "missing", "present"} and,
        numeric, "bins" (per PSI bin), "below" and "above"; categorical, "counts" ({training category: n})."""
        missing, present = int(counts[0]), int(counts[1:].sum())
        out: Dict[str, Any] = {"kind": self.kind, "missing": missing, "present": present}
        if self.kind != NUMERIC:
            out["counts"] = {c: int(n) for c, n in zip(self.categories, counts[1:])}
        elif self.edges:
            by_place = counts[1:].reshape(3, self.bins)
            bins = by_place.sum(axis=0)
            out.update(below=int(by_place[BELOW].sum()), above=int(by_place[ABOVE].sum()), bins=bins.tolist())
        return out


@dataclasses.dataclass(frozen=True)
class Tally:
    """Counts of some scored records: `rows`, and per feature of the bins, its histogram of codes (a sum)."""

    rows: int
    counts: Tuple[np.ndarray, ...]

    def merge(self, other: "Tally") -> "Tally":
        return Tally(self.rows + other.rows, tuple(a + b for a, b in zip(self.counts, other.counts)))


@dataclasses.dataclass(frozen=True)
class Bins:
    """The bins of every feature both the training profile and the schema have, in schema order; of a user's
    records, of every column of the feature spec the profile holds (`model.user.profile.profiled`)."""

    features: Tuple[FeatureBins, ...]

    @classmethod
    def of(cls, training: Mapping[str, Any], schema: Union[Schema, FeatureSpec]) -> "Bins":
        known = training["features"]
        if isinstance(schema, FeatureSpec):
            return cls(
                tuple(
                    dataclasses.replace(FeatureBins.of(c.name, c.key, known[c.name]), record=c)
                    for c in profiled(schema, training)
                )
            )
        return cls(tuple(FeatureBins.of(f.name, f.key, known[f.name]) for f in schema.features if f.name in known))

    def empty(self) -> Tally:
        return Tally(0, tuple(np.zeros(f.size, np.int64) for f in self.features))

    def spec(self) -> Dict[str, Any]:
        """The parse spec of the binned features: missing numerics parse as NaN, missing categoricals as "" (a
        present one never is); a user's record columns parse as ragged lists (`profile.parse_spec`)."""
        records = [f.record for f in self.features if f.record is not None]
        if records:
            return parse_spec(records)
        return {
            f.key: tf.io.FixedLenFeature([], tf.float32, default_value=float("nan"))
            if f.kind == NUMERIC
            else tf.io.FixedLenFeature([], tf.string, default_value="")
            for f in self.features
        }

    def columns(self, parsed: Mapping[str, tf.Tensor], rows: tf.Tensor) -> tf.Tensor:
        """float32 [rows, features]: each feature's `FeatureBins.column` of columns parsed with `spec`."""
        if not self.features:
            return tf.zeros(tf.stack([rows, 0]), tf.float32)
        return tf.stack([f.column(self._values(f, parsed)) for f in self.features], axis=1)

    @staticmethod
    def _values(f: FeatureBins, parsed: Mapping[str, Any]) -> tf.Tensor:
        return parsed[f.key] if f.record is None else f.record.values(parsed[f.key])

    def count(self, columns: np.ndarray) -> Tally:
        """The tally of some rows' `columns` matrix ([rows, features])."""
        columns = np.asarray(columns)
        if not self.features:
            return Tally(len(columns), ())
        columns = columns.reshape(-1, len(self.features))
        found = (np.bincount(f.codes(columns[:, j]), minlength=f.size) for j, f in enumerate(self.features))
        return Tally(len(columns), tuple(c.astype(np.int64) for c in found))

    def chunks(self, files: Sequence[str], compression: str = "") -> Iterator[Tally]:
        """The tally of each `CHUNK_ROWS` records of the TFRecord `files` ("GZIP" or "" `compression`)."""
        spec = self.spec()

        @tf.autograph.experimental.do_not_convert  # plain TF calls
        def parse(serialized: tf.Tensor) -> tf.Tensor:
            return self.columns(tf.io.parse_example(serialized, spec) if spec else {}, tf.size(serialized))

        dataset = tf.data.TFRecordDataset(list(files), compression_type=compression).batch(CHUNK_ROWS)
        for columns in dataset.map(parse, num_parallel_calls=2).prefetch(1).as_numpy_iterator():
            yield self.count(columns)

    def tally(self, files: Sequence[str], compression: str = "") -> Tally:
        """The tally of every record of `files`, read here."""
        total = self.empty()
        for part in self.chunks(files, compression):
            total = total.merge(part)
        return total

    def checked(self, tally: Tally, rows: Optional[int]) -> Tally:
        """`tally`, unless `rows` (None: not checked) is not its number of records (a ValueError)."""
        if rows is not None and rows != tally.rows:
            raise ValueError(f"skew check: the files hold {tally.rows} records, not the {rows} expected")
        return tally

    def scored(self, tally: Tally) -> Dict[str, Any]:
        """The scored rows as `skew.compare` reads them: {"rows", "features": {name: `FeatureBins.entry`}}."""
        return {"rows": tally.rows, "features": {f.name: f.entry(c) for f, c in zip(self.features, tally.counts)}}


class CodeCounter:
    """Counts the `columns` matrix batch prediction's model passes through (`CODES_FEATURE`) as the real rows are
    written: `counted(joined)` takes it out of each batch's outputs; `tally` is the rows' so far."""

    def __init__(self, bins: Bins):
        self.bins, self.tally = bins, bins.empty()

    def counted(self, joined: Iterator[Tuple[Any, Dict[str, np.ndarray]]]) -> Iterator[Tuple[Any, Dict[str, Any]]]:
        for host, outputs in joined:
            self.tally = self.tally.merge(self.bins.count(outputs.pop(CODES_FEATURE)))
            yield host, outputs
