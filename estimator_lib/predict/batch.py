"""Batch prediction to sharded JSON Lines, from a checkpoint (TPUEstimator) or an exported SavedModel.

Checkpoint path (`batch_predict`), what runs where:
  * host CPU, input pipeline: the prepared TFRecords, in file order, padded with empty Examples to whole
    predict batches (`inputs.predict_input_fn_builder`); each row carries `is_padding` (float32, 1.0 for
    padding), `example_index` (int32, its position in the input) and `example_key_bytes` (its key packed into
    int32 by `example_keys.encode`). TPUs need one static batch shape, so the last batch is padded rather than
    short.
  * TPU (or CPU with use_tpu=False): the model. A string cannot pass through a TPU computation, so the key
    travels as int32 and the model copies these three into its predictions. On CPU one `session.run`
    predicts several whole batches (`inputs.PREDICT_ROWS_PER_RUN` rows, parsed at once) when the input is
    large, still batch by batch (`model_fn.predict_loop`): the outputs are bitwise those of one batch per run.
  * host CPU, here: the predict generator is consumed whole batch by whole batch
    (`yield_single_examples=False`) in a producer thread. Each batch is checked (real rows are exactly the
    next input positions, padding only after the last real row), padding is dropped and the keys are unpacked
    (`example_keys.decode`, vectorised). The records are read a second time, in a parallel tf.data pass, only
    for passthrough columns or from the predict batch holding the first key longer than
    `example_keys.MAX_KEY_BYTES` on. Rows are formatted 1024 at a time (one string format per piece, no
    per-row `json.dumps`).

Raw rows (`predict_raw`): CSV / JSON Lines rows, with or without the label, are encoded through the training
schema by `prepare.encode_for_scoring` (host CPU, prepare's readers and bad-row policies, input order kept)
and then scored by `batch_predict` with the encoded row count.

SavedModel path (`predict_from_saved_model`): the CPU (`serve`) meta graph's `predict` signature is called
inside the tf.data pipeline on batches of serialized Examples, so keys come from the same batch; no
checkpoint or estimator is needed.

Output (both paths): `output_dir/predictions-SSSSS-of-NNNNN.jsonl` holding consecutive ranges of the input
(reading the shards in name order gives input order) and `manifest.json` (row count, per-shard rows and
sha256). Everything is written to a staging directory and published with `storage.commit_directory`, so
`output_dir` is either absent, a previous complete output, or this complete output (`storage.is_committed`),
locally and on gs://. One JSON object per input row:
  {"key": ..., <passthrough column>: value or null, ...,
   "class": name, "class_id": int, "probabilities": {name: p, ...}}      (classification)
   "value": float                                                       (regression)
Floats are written as the shortest text that reads back as the same float32 (float64 for float64 values),
by orjson's native formatter.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import json
import os
import queue
import re
import shutil
import tempfile
import threading
from json.encoder import encode_basestring as _json_string
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import orjson
import tensorflow as tf

from estimator_lib import storage
from estimator_lib.config import DEFAULT_MISSING_VALUES, JobConfig
from estimator_lib.data import example_keys, records
from estimator_lib.data.example_keys import KEY_BYTES_FEATURE
from estimator_lib.data.prepare import encode_for_scoring
from estimator_lib.estimator import build_estimator
from estimator_lib.export import load_serving_model
from estimator_lib.model import checkpoints, inputs
from estimator_lib.model.inputs import Patterns
from estimator_lib.model.outputs import PredictionError, output_keys, real_rows
from estimator_lib.progress import RowProgress
from estimator_lib.schema import (
    CLASSIFICATION,
    INDEX_FEATURE,
    KEY_FEATURE,
    LABEL_KEY,
    NUMERIC,
    PADDING_FEATURE,
    Schema,
)

PREDICTIONS_MANIFEST = "manifest.json"
KEY_FIELD = "key"
CLASSIFICATION_FIELDS = ("class", "class_id", "probabilities")
REGRESSION_FIELDS = ("value",)
_AUTOTUNE = tf.data.AUTOTUNE
# Prediction batches buffered between the estimator's thread and the writer: enough to ride out a slow
# shard switch or a GC pause without stalling the model (32 x batch x outputs, a few MB at batch 1024; on CPU
# a queue item holds several batches, and the queue as many fewer items).
_QUEUE_DEPTH = 32
_FORMAT_ROWS = 1024
Batch = Dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class PredictResult:
    """A committed prediction output.

    Attributes:
      output_dir: where the JSONL shards and manifest.json were committed.
      count: rows written (one per input row; padding excluded).
      shards: shard file URIs, in input order.
      manifest: what manifest.json holds: "count", "shards" [{"file", "rows", "bytes", "sha256"}], "fields",
        "source" (checkpoint or SavedModel), "inputs".
    """

    output_dir: str
    count: int
    shards: Tuple[str, ...]
    manifest: Dict[str, Any]


# -- columns read on the host ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Column:
    """A passthrough column: its original name, the record feature holding it and how to render it."""

    name: str
    feature: str  # key in the tf.train.Example
    render: str  # "float", "string", "int_text", "class_name" or "key"


def _passthrough_columns(schema: Schema, names: Sequence[str]) -> Tuple[_Column, ...]:
    """Resolves the requested passthrough columns (original names) against the schema."""
    reserved = {KEY_FIELD} | set(CLASSIFICATION_FIELDS if schema.label.task == CLASSIFICATION else REGRESSION_FIELDS)
    known: Dict[str, _Column] = {}
    for f in schema.features:
        render = "float" if f.kind == NUMERIC else ("int_text" if f.value_type == "int" else "string")
        known[f.name] = _Column(f.name, f.key, render)
    label_render = "class_name" if schema.label.task == CLASSIFICATION else "float"
    known[schema.label.name] = _Column(schema.label.name, LABEL_KEY, label_render)
    if schema.key_column:
        known[schema.key_column] = _Column(schema.key_column, KEY_FEATURE, "key")
    columns = []
    for name in names:
        if name not in known:
            raise ValueError(
                f"passthrough column {name!r} is not in the schema; use original column names from: {sorted(known)}"
            )
        if name in reserved:
            raise ValueError(
                f"passthrough column {name!r} collides with the output field of the same name "
                f"{sorted(reserved)}; leave it out (the key is always written as {KEY_FIELD!r})"
            )
        columns.append(known[name])
    if len({c.name for c in columns}) != len(columns):
        raise ValueError(f"passthrough={list(names)} lists a column twice")
    return tuple(columns)


def _host_parse_fn(columns: Sequence[_Column], schema: Schema):
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


def _host_columns(
    files: List[str], columns: Sequence[_Column], schema: Schema, batch_size: int, start: int = 0
) -> tf.data.Dataset:
    """The second host-side read: keys and passthrough columns of the same records, in the same order,
    from record `start` on."""
    dataset = tf.data.TFRecordDataset(files).skip(start).batch(batch_size)
    return dataset.map(_host_parse_fn(columns, schema), num_parallel_calls=_AUTOTUNE).prefetch(_AUTOTUNE)


class _RowBuffer:
    """Hands out host-side rows in the counts the prediction batches need (batches may not align)."""

    def __init__(self, batches: Iterator[Dict[str, Any]]):
        self._batches = batches
        self._pending: List[Dict[str, Any]] = []
        self._available = 0

    def take(self, n: int) -> Dict[str, Any]:
        while self._available < n:
            batch = next(self._batches, None)
            if batch is None:
                raise PredictionError(
                    f"the model returned more real rows than the host pass read ({self._available} left, "
                    f"{n} needed): the input files changed while predicting; rerun on a stable input"
                )
            self._pending.append(batch)
            self._available += len(batch[KEY_FEATURE])
        merged = self._pending[0] if len(self._pending) == 1 else _concat(self._pending)
        taken, rest = _slice(merged, 0, n), _slice(merged, n, None)
        self._pending = [rest] if len(rest[KEY_FEATURE]) else []
        self._available -= n
        return taken

    def assert_exhausted(self) -> None:
        if self._available or next(self._batches, None) is not None:
            raise PredictionError(
                "the host pass read more rows than the model predicted: the input files changed while "
                "predicting; rerun on a stable input"
            )


def _concat(batches: List[Dict[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name, first in batches[0].items():
        if isinstance(first, tuple):
            out[name] = tuple(np.concatenate([b[name][i] for b in batches]) for i in range(len(first)))
        else:
            out[name] = np.concatenate([b[name] for b in batches])
    return out


def _slice(batch: Dict[str, Any], start: int, end: Optional[int]) -> Dict[str, Any]:
    """Rows [start:end) of a batch whose values are arrays or (value, present) tuples of arrays."""
    return {
        name: tuple(v[start:end] for v in value) if isinstance(value, tuple) else value[start:end]
        for name, value in batch.items()
    }


# -- JSON Lines formatting ------------------------------------------------------------------------------------
# Bytes a key must not hold to be written verbatim between quotes: JSON escapes these. "\n" is absent because
# `_json_keys` joins the keys with it (so a truncated UTF-8 sequence cannot borrow bytes from the next key).
_NEEDS_ESCAPE = re.compile(rb'[\x00-\x09\x0b-\x1f"\\]')


def _field(name: str, placeholder: str) -> str:
    """'"name": %s' with the name JSON-encoded and any "%" in it escaped for %-formatting."""
    return _json_string(name).replace("%", "%%") + ": " + placeholder


def _json_keys(keys: np.ndarray) -> List[bytes]:
    """The inside of each key's JSON string literal (UTF-8, without the quotes).

    Keys are almost always plain text: one regex search and one UTF-8 check over the joined batch then let
    the key bytes be written as they are. Otherwise each key is escaped (invalid UTF-8 raises).
    """
    raw = keys.tolist()
    joined = b"\n".join(raw)
    if _NEEDS_ESCAPE.search(joined) is None:
        try:
            joined.decode("utf-8")
            return raw
        except UnicodeDecodeError:
            pass
    return [_json_string(k.decode("utf-8"))[1:-1].encode("utf-8") for k in raw]


def _json_numbers(values: np.ndarray) -> List[bytes]:
    """Each value's JSON number text: for floats the shortest text that reads back as the same value in the
    array's own precision (float32 stays float32: 0.1f is "0.1", not "0.100000001"). One native call per
    column, not a Python format per value.

    Raises ValueError for a non-finite float, which JSON cannot hold."""
    if values.size == 0:
        return []
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        raise ValueError(f"non-finite values {values[~np.isfinite(values)][:5].tolist()} have no JSON number")
    return orjson.dumps(np.ascontiguousarray(values), option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].split(b",")


class _RowFormatter:
    """Formats a batch of rows as UTF-8 JSON Lines with one bytes `%` format per batch.

    Field names and class names are encoded once; every value arrives as ready-made bytes (numbers from
    `_json_numbers`), so the format only copies. The result is bytes, ready to hash and write.
    """

    def __init__(self, schema: Schema, columns: Sequence[_Column]):
        self._schema = schema
        self._columns = tuple(columns)
        self._classification = schema.label.task == CLASSIFICATION
        self._class_names = np.array([_json_string(c).encode("utf-8") for c in schema.label.classes], dtype=object)
        names = [KEY_FIELD] + [c.name for c in columns]
        parts = [_field(KEY_FIELD, '"%s"')] + [_field(n, "%s") for n in names[1:]]
        if self._classification:
            probs = ", ".join(_field(c, "%s") for c in schema.label.classes)
            parts += [
                _field("class", "%s"),
                _field("class_id", "%s"),
                _field("probabilities", "{" + probs + "}"),
            ]
        else:
            parts.append(_field("value", "%s"))
        self._template = ("{" + ", ".join(parts) + "}\n").encode("utf-8")
        self.fields = tuple(names) + (CLASSIFICATION_FIELDS if self._classification else REGRESSION_FIELDS)

    def format(self, host: Dict[str, Any], outputs: Batch) -> bytes:
        """host: key bytes [n] and passthrough (value, present) [n]; outputs: the model's arrays [n, ...]."""
        n = len(host[KEY_FEATURE])
        if n == 0:
            return b""
        cols: List[Sequence[Any]] = [_json_keys(host[KEY_FEATURE])]
        cols += [self._render(c, *host[c.name]) for c in self._columns]
        cols += self._output_columns(outputs, host[KEY_FEATURE])
        # Row-major values by slice assignment: a C-level copy per column instead of a tuple per row.
        values: List[Any] = [None] * (n * len(cols))
        for i, column in enumerate(cols):
            values[i :: len(cols)] = column
        return (self._template * n) % tuple(values)

    def _render(self, column: _Column, values: np.ndarray, present: np.ndarray) -> List[bytes]:
        if column.render == "float":
            try:
                texts = _json_numbers(np.where(present, values, 0))  # a missing value may be NaN: not formatted
            except ValueError as e:
                raise PredictionError(f"passthrough column {column.name!r}: {e}") from None
            return [t if ok else b"null" for t, ok in zip(texts, present.tolist())]
        if column.render == "class_name":
            ids = np.clip(values, 0, len(self._class_names) - 1)
            return np.where(present, self._class_names[ids], b"null").tolist()
        out = []
        for value, ok in zip(values.tolist(), present.tolist()):
            text = value.decode("utf-8") if ok else None
            if text is None:
                out.append(b"null")
            elif column.render == "int_text" and text.lstrip("-").isdigit():
                out.append(str(int(text)).encode("utf-8"))
            else:
                out.append(_json_string(text).encode("utf-8"))
        return out

    def _output_columns(self, outputs: Batch, keys: np.ndarray) -> List[Sequence[Any]]:
        values = outputs["probabilities"] if self._classification else outputs["predictions"]
        finite = np.isfinite(values).reshape(len(keys), -1).all(axis=1)
        if not finite.all():
            bad = keys[~finite][:5]
            raise PredictionError(f"the model returned non-finite outputs for keys {[k.decode() for k in bad]}")
        if not self._classification:
            return [_json_numbers(values.reshape(-1))]
        class_ids = outputs["class_ids"].reshape(-1)
        return [
            self._class_names[class_ids].tolist(),
            _json_numbers(class_ids),
            *(_json_numbers(column) for column in values.T),
        ]


# -- sharded, checksummed, atomically published output -------------------------------------------------------
def shard_name(index: int, num_shards: int) -> str:
    return f"predictions-{index:05d}-of-{num_shards:05d}.jsonl"


class _ShardWriter:
    """Writes `count` rows into `num_shards` files of consecutive rows (sizes differ by at most one)."""

    def __init__(self, directory: str, count: int, num_shards: int):
        self._directory = directory
        self._num_shards = num_shards
        self.sizes = shard_sizes(count, num_shards)
        self.ends = list(itertools.accumulate(self.sizes))  # each shard's end row (exclusive)
        self._shard = -1
        self._left = 0
        self._file = None
        self._hash = hashlib.sha256()
        self._bytes = 0
        self.shards: List[Dict[str, Any]] = []
        self._next_shard()

    def _next_shard(self) -> None:
        if self._file is not None:
            self._file.close()
            self.shards.append(
                {
                    "file": shard_name(self._shard, self._num_shards),
                    "rows": self.sizes[self._shard],
                    "bytes": self._bytes,
                    "sha256": self._hash.hexdigest(),
                }
            )
        self._shard += 1
        if self._shard < self._num_shards:
            path = os.path.join(self._directory, shard_name(self._shard, self._num_shards))
            self._file = open(path, "wb", buffering=1 << 20)
            self._hash, self._bytes, self._left = hashlib.sha256(), 0, self.sizes[self._shard]
        else:
            self._file = None

    def rows_until_next_shard(self) -> int:
        while self._file is not None and self._left == 0:
            self._next_shard()
        return self._left

    def write(self, data: bytes, rows: int) -> None:
        self._file.write(data)
        self._hash.update(data)
        self._bytes += len(data)
        self._left -= rows

    def close(self) -> List[Dict[str, Any]]:
        while self._file is not None:
            if self._left:
                raise PredictionError(f"shard {self._shard} is {self._left} row(s) short of its planned size")
            self._next_shard()
        return self.shards


def _write_rows(joined: Iterator[Tuple[Dict[str, Any], Batch]], formatter: _RowFormatter, writer: _ShardWriter) -> int:
    """Formats and writes joined (host columns, outputs) batches, splitting them at shard boundaries.

    A batch is formatted `_FORMAT_ROWS` rows at a time: formatting holds the GIL, and hashing each piece
    releases it, so the estimator's thread never waits long to start its next step."""
    written, progress = 0, RowProgress("batch predict", total=sum(writer.sizes))
    for host, outputs in joined:
        for _, rows, data in formatted_pieces(host, outputs, formatter, written, writer.ends):
            writer.rows_until_next_shard()  # moves on to the piece's shard
            writer.write(data, rows)
            written += rows
            progress.update(rows)
    progress.finish()
    return written


def formatted_pieces(
    host: Dict[str, Any], outputs: Batch, formatter: _RowFormatter, first_row: int, ends: Sequence[int]
) -> Iterator[Tuple[int, int, bytes]]:
    """(shard, rows, JSON Lines bytes) pieces of one joined batch whose first row is input row `first_row`:
    cut at the shards' ends (`ends`, cumulative, exclusive) and every `_FORMAT_ROWS` rows. The bytes do not
    depend on where a batch is cut, so any batching of the rows gives the same shards."""
    start, n = 0, len(host[KEY_FEATURE])
    while start < n:
        row = first_row + start
        shard = bisect.bisect_right(ends, row)
        if shard >= len(ends):
            raise PredictionError(f"more rows than the {ends[-1] if ends else 0} planned ones arrived")
        end = start + min(n - start, ends[shard] - row, _FORMAT_ROWS)
        yield shard, end - start, formatter.format(_slice(host, start, end), _slice(outputs, start, end))
        start = end


def _check_num_shards(num_shards: int) -> None:
    if not isinstance(num_shards, int) or isinstance(num_shards, bool) or num_shards < 1:
        raise ValueError(f"num_shards={num_shards!r} must be a positive integer, e.g. 1")


def _commit(
    joined: Iterator[Tuple[Dict[str, Any], Batch]],
    formatter: _RowFormatter,
    count: int,
    output_dir: str,
    num_shards: int,
    provenance: Dict[str, Any],
) -> PredictResult:
    """Writes everything into a staging directory, then publishes it as `output_dir` in one commit."""

    def write_shards(staging: str) -> List[Dict[str, Any]]:
        writer = _ShardWriter(staging, count, num_shards)
        written = _write_rows(joined, formatter, writer)
        shards = writer.close()
        if written != count:
            raise PredictionError(f"wrote {written} rows for {count} input rows")
        return shards

    return publish(write_shards, formatter.fields, output_dir, num_shards, provenance)


def publish(
    write_shards: Callable[[str], List[Dict[str, Any]]],
    fields: Sequence[str],
    output_dir: str,
    num_shards: int,
    provenance: Dict[str, Any],
) -> PredictResult:
    """Publishes a prediction output in one commit: `write_shards(staging)` writes the shards into a local
    staging directory and returns their manifest entries ({"file", "rows", "bytes", "sha256"}, in order);
    the manifest is written beside them."""

    def fill(staging: str) -> Dict[str, Any]:
        shards = write_shards(staging)
        count = sum(s["rows"] for s in shards)
        manifest = dict(provenance, format="jsonl", count=count, num_shards=num_shards, shards=shards)
        manifest["fields"] = list(fields)
        storage.write_text(os.path.join(staging, PREDICTIONS_MANIFEST), json.dumps(manifest, indent=2, sort_keys=True))
        return manifest

    manifest = storage.commit_staged(output_dir, fill)
    if not storage.is_committed(output_dir):
        raise PredictionError(f"published {output_dir!r} but its commit marker is missing")
    uris = tuple(storage.join(output_dir, s["file"]) for s in manifest["shards"])
    return PredictResult(output_dir, manifest["count"], uris, manifest)


# -- reading an output back -----------------------------------------------------------------------------------
def verify_output(output_dir: str) -> Dict[str, Any]:
    """Checks a committed prediction output (marker, per-shard rows and sha256); returns its manifest."""
    if not storage.is_committed(output_dir):
        raise FileNotFoundError(f"{output_dir!r} holds no committed prediction output; run batch prediction")
    manifest = json.loads(storage.read_text(storage.join(output_dir, PREDICTIONS_MANIFEST)))
    for shard in manifest["shards"]:
        data = storage.read_bytes(storage.join(output_dir, shard["file"]))
        if hashlib.sha256(data).hexdigest() != shard["sha256"] or data.count(b"\n") != shard["rows"]:
            raise PredictionError(f"shard {shard['file']} of {output_dir!r} does not match its manifest entry")
    return manifest


def read_predictions(output_dir: str) -> List[Dict[str, Any]]:
    """All rows of a committed output in input order (verified first). For checks and small outputs."""
    manifest = verify_output(output_dir)
    rows: List[Dict[str, Any]] = []
    for shard in manifest["shards"]:
        text = storage.read_text(storage.join(output_dir, shard["file"]))
        rows.extend(json.loads(line) for line in text.splitlines())
    return rows


# -- entry points ---------------------------------------------------------------------------------------------
def batch_predict(
    job: JobConfig,
    schema: Schema,
    model_dir: str,
    data: Patterns,
    output_dir: str,
    *,
    num_examples: Optional[int] = None,
    passthrough: Sequence[str] = (),
    num_shards: int = 1,
    checkpoint_path: Optional[str] = None,
) -> PredictResult:
    """Predicts every record of `data` with a checkpoint and commits sharded JSON Lines at `output_dir`.

    Args:
      job: the job config; `training.predict_batch_size` is the (global, static) predict batch.
      schema: the dataset schema the model was trained with.
      model_dir: the estimator's model directory.
      data: prepared TFRecord file patterns (local or gs://), read in sorted file order.
      output_dir: where to commit the shards and manifest.json (local or gs://); a previous output there is
        replaced only once this one is complete.
      num_examples: records in `data` when known (prepare's manifest); counted otherwise. A wrong value fails.
      passthrough: original column names to copy into each output row (features, the label, the key column).
      num_shards: output files, each a consecutive range of rows.
      checkpoint_path: the checkpoint to use; by default the model's (`model.checkpoints.selected_checkpoint`:
        the best by validation loss, else the newest).

    Returns:
      The committed `PredictResult`.
    """
    columns = _passthrough_columns(schema, passthrough)
    _check_num_shards(num_shards)
    with records.named_data_loss(inputs.resolve_files(data)):
        return _checkpoint_predictions(
            job, schema, model_dir, data, output_dir, num_examples, columns, num_shards, checkpoint_path, {}
        )


def predict_raw(
    job: JobConfig,
    schema: Schema,
    model_dir: str,
    data: Patterns,
    output_dir: str,
    *,
    staging_dir: Optional[str] = None,
    key_column: Optional[str] = None,
    input_format: str = "auto",
    bad_rows: str = "fail",
    max_bad_fraction: float = 0.01,
    missing_values: Optional[Sequence[str]] = None,
    passthrough: Sequence[str] = (),
    num_shards: int = 1,
    num_workers: Optional[int] = None,
    checkpoint_path: Optional[str] = None,
) -> PredictResult:
    """Scores raw CSV / JSON Lines rows (local or gs://, globs) with a checkpoint, in input order.

    Two steps: `prepare.encode_for_scoring` encodes the rows through `schema` on the host CPU (the label is
    optional; unknown categories score as out-of-vocabulary; extra columns are allowed and listed; bad rows
    fail or are quarantined as in `prepare`), then `batch_predict` scores the encoded records with their
    count as `num_examples` (no counting pass). The output is `batch_predict`'s, one row per good input row;
    its manifest's `raw` entry records the raw inputs, the row counts (bad, labelled), the extra columns
    and where the encoded rows are.

    Args:
      job, schema, model_dir, output_dir, num_shards, checkpoint_path: as for `batch_predict`.
      data: CSV / JSON Lines file patterns.
      staging_dir: where the encoded rows are published and kept (TFRecords, manifest.json and, when rows
        were set aside, quarantine.jsonl), local or gs://; None encodes into a local temporary directory that
        is deleted afterwards.
      key_column, input_format, bad_rows, max_bad_fraction, num_workers: as for `encode_for_scoring`.
      missing_values: the missing-value tokens; use the ones the training data was prepared with. None uses
        prepare's defaults.
      passthrough: columns to copy into each output row. Only schema columns (features, the label: null
        when a row has none, the key column) travel through the encoded records; other raw columns are
        not carried: join them back on the key.

    Raises:
      DataError: bad input (file, line, column, value, expectation); nothing is published at `output_dir`.
    """
    columns = _passthrough_columns(schema, passthrough)  # fails before any encoding
    _check_num_shards(num_shards)
    temporary = tempfile.mkdtemp(prefix="scoring-") if staging_dir is None else None
    encoded_dir = staging_dir or os.path.join(temporary, "rows")  # type: ignore[arg-type]
    try:
        rows = encode_for_scoring(
            data,
            schema,
            encoded_dir,
            key_column=key_column,
            input_format=input_format,
            bad_rows=bad_rows,
            max_bad_fraction=max_bad_fraction,
            missing_values=DEFAULT_MISSING_VALUES if missing_values is None else missing_values,
            num_workers=num_workers,
        )
        return _checkpoint_predictions(
            job,
            schema,
            model_dir,
            rows.files,
            output_dir,
            rows.count,
            columns,
            num_shards,
            checkpoint_path,
            {"raw": raw_record(rows, staging_dir)},
        )
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


def raw_record(rows: Any, staging_dir: Optional[str]) -> Dict[str, Any]:
    """The manifest's `raw` entry for rows encoded by `encode_for_scoring` (a `ScoringData`) into `staging_dir`
    (None: a temporary directory, not kept)."""
    return {
        "inputs": [i["name"] for i in rows.manifest["inputs"]],
        "rows": rows.manifest["rows"],
        "extra_columns": rows.extra_columns,
        "encoded": staging_dir,
        "encoded_fingerprint": rows.manifest["fingerprint"],
    }


def _checkpoint_predictions(
    job: JobConfig,
    schema: Schema,
    model_dir: str,
    data: Patterns,
    output_dir: str,
    num_examples: Optional[int],
    columns: Sequence[_Column],
    num_shards: int,
    checkpoint_path: Optional[str],
    provenance: Dict[str, Any],
) -> PredictResult:
    """`batch_predict` after its argument checks; `provenance` adds entries to the manifest."""
    files = inputs.resolve_files(data)
    input_fn = inputs.predict_input_fn_builder(files, schema, num_examples)
    count = input_fn.num_examples  # type: ignore[attr-defined]
    per_run = 1 if job.tpu.use_tpu else inputs.predict_batches_per_run(job.training.predict_batch_size, count)
    estimator = build_estimator(job, schema, model_dir, predict_batches_per_run=per_run)
    checkpoint = checkpoint_path or checkpoints.selected_checkpoint(model_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint in model_dir={model_dir!r} to predict with; train first")
    batches = estimator.predict(
        input_fn, predict_keys=fetched_keys(schema), yield_single_examples=False, checkpoint_path=checkpoint
    )
    # The generator keeps the estimator's graph as this thread's default graph between batches, which would
    # break the eager host pass; a producer thread also overlaps the model with formatting and writing.
    batches = _in_background(batches, depth=max(2, _QUEUE_DEPTH // per_run))
    keyed = _KeyedRows(files, columns, schema, job.training.predict_batch_size)
    provenance = {
        **provenance,
        "source": {"kind": "checkpoint", "checkpoint": checkpoint, "model_dir": model_dir},
        "inputs": files,
        "passthrough": [c.name for c in columns],
        "predict_batch_size": job.training.predict_batch_size,
        "keys": keyed.report,  # complete once every row is joined, before the manifest is written
    }
    joined = keyed.join(real_rows(batches, count))
    return _commit(joined, _RowFormatter(schema, columns), count, output_dir, num_shards, provenance)


def _in_background(iterator: Iterator[Any], depth: int) -> Iterator[Any]:
    """Consumes `iterator` in its own thread (to the end, or closing it when the consumer stops early)
    and yields its items here; an exception in the thread is re-raised here."""
    items: "queue.Queue[Tuple[str, Any]]" = queue.Queue(depth)
    stop = threading.Event()

    def put(kind: str, value: Any) -> None:
        while not stop.is_set():
            try:
                items.put((kind, value), timeout=0.1)
                return
            except queue.Full:
                continue

    def produce() -> None:
        try:
            for item in iterator:
                put("item", item)
                if stop.is_set():
                    break
            put("end", None)
        except BaseException as e:  # handed to the consumer, which raises it
            put("error", e)
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="predict-batches", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = items.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        thread.join()


class _KeyedRows:
    """Joins prediction batches (real rows, in input order) to their keys and passthrough columns.

    The keys come back with the predictions, packed by `example_keys`. The records are read a second time,
    on the host, only for passthrough columns (then from the first row) or once a key longer than
    `example_keys.MAX_KEY_BYTES` turns up (then from that row on).
    """

    def __init__(self, files: List[str], columns: Sequence[_Column], schema: Schema, batch_size: int):
        self._files, self._columns, self._schema, self._batch_size = files, columns, schema, batch_size
        # For the manifest (filled in as the rows go by): where the keys came from.
        self.report: Dict[str, Any] = {"from": "predictions", "records_read_again_from_row": None}

    def join(self, outputs: Iterator[Batch]) -> Iterator[Tuple[Dict[str, Any], Batch]]:
        buffer: Optional[_RowBuffer] = None
        position = 0
        for batch in outputs:
            packed = batch.pop(KEY_BYTES_FEATURE, None)
            n = len(next(iter(batch.values())))
            if buffer is None:
                keyed = self._rows_keyed_by_predictions(packed, n)
                if keyed:
                    yield {KEY_FEATURE: example_keys.decode(packed[:keyed])[0]}, _slice(batch, 0, keyed)
                    batch, position, n = _slice(batch, keyed, None), position + keyed, n - keyed
                if n:  # from the batch holding the first long key on (from the first row with passthrough)
                    self.report.update({"from": "records" if position == 0 else "predictions, then records"})
                    self.report["records_read_again_from_row"] = position
                    host = _host_columns(self._files, self._columns, self._schema, self._batch_size, position)
                    buffer = _RowBuffer(host.as_numpy_iterator())
            if n:
                yield buffer.take(n), batch
                position += n
        if buffer is not None:
            buffer.assert_exhausted()

    def _rows_keyed_by_predictions(self, packed: Optional[np.ndarray], n: int) -> int:
        """How many of these n rows take their keys from the predictions: all, or those of the whole predict
        batches before the first key longer than `example_keys.MAX_KEY_BYTES`; none with passthrough columns.
        (On CPU the n rows hold several batches, the first starting at a multiple of the batch size.)"""
        if self._columns or packed is None:
            return 0
        long_keys = np.flatnonzero(packed[:, 0] > example_keys.MAX_KEY_BYTES)
        return n if not len(long_keys) else int(long_keys[0]) // self._batch_size * self._batch_size


def predict_from_saved_model(
    export_dir: str,
    schema: Schema,
    data: Patterns,
    output_dir: str,
    *,
    batch_size: int = 256,
    num_examples: Optional[int] = None,
    passthrough: Sequence[str] = (),
    num_shards: int = 1,
) -> PredictResult:
    """Predicts every record of `data` with an exported SavedModel's CPU graph (no checkpoint needed).

    Runs on the host CPU: the `serve` meta graph's `predict` signature is called inside the tf.data pipeline
    on batches of serialized Examples (the last batch may be short: the CPU graph has a dynamic batch). The
    output is the same as `batch_predict`'s.

    Args:
      export_dir: a SavedModel written by `estimator_lib.export.export_model` (local or gs://).
      schema: the dataset schema (for keys, passthrough columns and class names).
      batch_size: rows per signature call.
      num_examples: records in `data` when known (prepare's manifest); counted otherwise (one extra pass
        over the files). A wrong value fails and publishes nothing.
      Others as for `batch_predict`.
    """
    columns = check_saved_model_arguments(schema, batch_size, passthrough, num_shards, num_examples)
    files = inputs.resolve_files(data)
    count = inputs.count_records(files) if num_examples is None else num_examples
    model = load_serving_model(export_dir)
    dataset = tf.data.TFRecordDataset(files)
    if num_examples is not None:  # a stale count fails in the pipeline, before anything is published
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_examples))
    dataset = predicted_batches(dataset.batch(batch_size), model, columns, schema)
    provenance = saved_model_provenance(export_dir, files, columns, batch_size)
    try:
        joined = dataset.as_numpy_iterator()
        return _commit(joined, _RowFormatter(schema, columns), count, output_dir, num_shards, provenance)
    finally:
        model.close()


def predicted_batches(
    batches: tf.data.Dataset, model: Any, columns: Sequence[_Column], schema: Schema
) -> tf.data.Dataset:
    """Serialized Example batches (string [B]) -> (host columns, model outputs) per batch, on the host CPU.

    The `serve` graph's `predict` signature runs inside this tf.data map: called eagerly instead, the same
    graph gives float32 outputs that differ in the last bits, so every SavedModel path goes through here."""
    host_parse = _host_parse_fn(columns, schema)

    @tf.autograph.experimental.do_not_convert  # plain TF calls; nothing for autograph to convert
    def predict(serialized: tf.Tensor):
        outputs = model.signature(examples=serialized)
        return host_parse(serialized), {k: outputs[k] for k in output_keys(schema)}

    dataset = batches.map(predict, num_parallel_calls=inputs.PARSE_PARALLELISM, deterministic=True)
    return dataset.prefetch(inputs.PREFETCH_BATCHES).with_options(inputs.fixed_pipeline_options())


def check_saved_model_arguments(
    schema: Schema, batch_size: int, passthrough: Sequence[str], num_shards: int, num_examples: Optional[int]
) -> Tuple[_Column, ...]:
    """Checks `predict_from_saved_model`'s arguments (before any work); returns the passthrough columns."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be a positive integer, e.g. 256")
    columns = _passthrough_columns(schema, passthrough)
    _check_num_shards(num_shards)
    _check_num_examples(num_examples)
    return columns


def saved_model_provenance(
    export_dir: str, files: List[str], columns: Sequence[_Column], batch_size: int
) -> Dict[str, Any]:
    """The manifest's record of a SavedModel prediction: the model, the inputs, the columns, the batch."""
    return {
        "source": {"kind": "saved_model", "export_dir": export_dir},
        "inputs": files,
        "passthrough": [c.name for c in columns],
        "predict_batch_size": batch_size,
    }


def _check_num_examples(num_examples: Optional[int]) -> None:
    if num_examples is not None and (
        not isinstance(num_examples, int) or isinstance(num_examples, bool) or num_examples < 0
    ):
        raise ValueError(
            f"num_examples={num_examples!r} must be a non-negative integer (prepare's row count) or None to count"
        )


def fetched_keys(schema: Schema) -> List[str]:
    """What batch prediction fetches from the estimator per batch: the outputs, the row markers and the
    packed keys; not the logits."""
    return [*output_keys(schema), INDEX_FEATURE, PADDING_FEATURE, KEY_BYTES_FEATURE]


def shard_sizes(count: int, num_shards: int) -> List[int]:
    """Rows per shard: consecutive ranges whose sizes differ by at most one."""
    base, extra = divmod(count, num_shards)
    return [base + (1 if i < extra else 0) for i in range(num_shards)]
