"""Batch prediction from a checkpoint (TPUEstimator), to sharded JSON Lines in input order.

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
    (`yield_single_examples=False`) in a producer thread (`background`). Each batch is checked (real rows are
    exactly the next input positions, padding only after the last real row: `model.outputs.real_rows`),
    padding is dropped and the keys are joined (`keys.KeyedRows`). Rows are formatted `shards.FORMAT_ROWS` at
    a time (`jsonl.RowFormatter`) and written as sharded, atomically published JSON Lines (`shards`).

Raw rows (`predict_raw`): CSV / JSON Lines rows, with or without the label, are encoded through the training
schema by `prepare.encode_for_scoring` (host CPU, prepare's readers and bad-row policies, input order kept)
and then scored by `batch_predict` with the encoded row count.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from estimator_lib.config import DEFAULT_MISSING_VALUES, JobConfig
from estimator_lib.data import records
from estimator_lib.data.example_keys import KEY_BYTES_FEATURE
from estimator_lib.data.prepare import encode_for_scoring
from estimator_lib.data.score import ScoringData
from estimator_lib.estimator import build_estimator
from estimator_lib.model import checkpoints, inputs
from estimator_lib.model.inputs import Patterns
from estimator_lib.model.outputs import output_keys, real_rows
from estimator_lib.predict.background import in_background
from estimator_lib.predict.columns import Column, passthrough_columns
from estimator_lib.predict.jsonl import RowFormatter
from estimator_lib.predict.keys import KeyedRows
from estimator_lib.predict.origins import Origins, prepared_origins, record_origins
from estimator_lib.predict.rows import Batch
from estimator_lib.predict.shards import PredictResult, check_num_shards, commit_rows
from estimator_lib.predict.skew import SkewCheck
from estimator_lib.schema import CODES_FEATURE, INDEX_FEATURE, PADDING_FEATURE, Schema

# Prediction batches buffered between the estimator's thread and the writer: enough to ride out a slow
# shard switch or a GC pause without stalling the model (32 x batch x outputs, a few MB at batch 1024; on CPU
# a queue item holds several batches, and the queue as many fewer items).
QUEUE_DEPTH = 32


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
    origins: Optional[Origins] = None,
    skew: Optional[SkewCheck] = None,
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
      origins: where the records came from (`origins.prepared_origins` for prepared rows); None: each row's
        TFRecord file and record index (`origins.record_origins`, one pass over the record lengths, which then gives
        `num_examples`).
      skew: the skew check of the records against the training data, run before any is scored (`skew.json`
        is written beside the predictions); None: no check.

    Returns:
      The committed `PredictResult`.

    Raises:
      SkewError: with `predict.skew=block`, the records are skewed; nothing is scored or published.
    """
    columns = passthrough_columns(schema, passthrough)
    check_num_shards(num_shards)
    files = inputs.resolve_files(data)
    with records.named_data_loss(files):
        if origins is None:
            origins = record_origins(files)
            num_examples = origins.count if num_examples is None else num_examples
        return _checkpoint_predictions(
            job,
            schema,
            model_dir,
            data,
            output_dir,
            num_examples,
            columns,
            num_shards,
            checkpoint_path,
            {},
            origins,
            skew,
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
    skew: Optional[SkewCheck] = None,
) -> PredictResult:
    """Scores raw CSV / JSON Lines rows (local or gs://, globs) with a checkpoint, in input order.

    Two steps: `prepare.encode_for_scoring` encodes the rows through `schema` on the host CPU (the label is
    optional; unknown categories score as out-of-vocabulary; extra columns are allowed and listed; bad rows
    fail or are quarantined as in `prepare`), then `batch_predict` scores the encoded records with their
    count as `num_examples` (no counting pass). The output is `batch_predict`'s, one row per good input row;
    its manifest's `raw` entry records the raw inputs, the row counts (bad, labelled), the extra columns
    and where the encoded rows are.

    Args:
      job, schema, model_dir, output_dir, num_shards, checkpoint_path, skew: as for `batch_predict` (the encoded
        rows are checked).
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
    columns = passthrough_columns(schema, passthrough)  # fails before any encoding
    check_num_shards(num_shards)
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
            encoded_origins(rows),
            skew,
        )
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


def encoded_origins(rows: ScoringData) -> Origins:
    """The origins of raw rows encoded by `encode_for_scoring`: their raw input file and line, by key."""
    return prepared_origins(rows.output_dir, rows.manifest, rows.manifest["key_column"] is not None)


def raw_record(rows: ScoringData, staging_dir: Optional[str]) -> Dict[str, Any]:
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
    columns: Sequence[Column],
    num_shards: int,
    checkpoint_path: Optional[str],
    provenance: Dict[str, Any],
    origins: Origins,
    skew: Optional[SkewCheck] = None,
) -> PredictResult:
    """`batch_predict` after its argument checks; `provenance` adds entries to the manifest; the skew check of
    the rows counts the codes the predict input passes through the model (`SkewCheck.tap`; "block" reads the rows
    before the model instead), its predictions' part after the scoring, and skew.json is committed with the
    predictions (`SkewCheck.finish`)."""
    files = inputs.resolve_files(data)
    tap = skew.tap(schema) if skew is not None else None
    input_fn = inputs.predict_input_fn_builder(files, schema, num_examples, tap.bins if tap is not None else None)
    count = input_fn.num_examples  # type: ignore[attr-defined]
    pending = skew.start(files, schema, count, tap=tap) if skew is not None else None
    counter = skew.counter() if pending is not None else None
    fetched = fetched_keys(schema) + ([CODES_FEATURE] if tap is not None else [])
    checkpoint, batches = _estimator_batches(job, schema, model_dir, input_fn, count, checkpoint_path, fetched)
    keyed = KeyedRows(files, columns, schema, job.training.predict_batch_size)
    provenance = {
        **provenance,
        "source": {"kind": "checkpoint", "checkpoint": checkpoint, "model_dir": model_dir},
        "inputs": files,
        "passthrough": [c.name for c in columns],
        "predict_batch_size": job.training.predict_batch_size,
        "keys": keyed.report,  # complete once every row is joined, before the manifest is written
    }
    joined = keyed.join(real_rows(batches, count))
    if tap is not None:
        joined = tap.counted(joined)
    formatter = RowFormatter(schema, columns, origins)
    finish = skew.finish(pending, counter) if skew is not None else None
    return commit_rows(joined, formatter, count, output_dir, num_shards, provenance, counter, finish)


def _estimator_batches(
    job: JobConfig,
    schema: Schema,
    model_dir: str,
    input_fn: Callable[..., Any],
    count: int,
    checkpoint_path: Optional[str],
    fetched: List[str],
) -> Tuple[str, Iterator[Batch]]:
    """The checkpoint used and the estimator's whole predict batches (padding included, the `fetched` keys),
    produced in a thread of their own."""
    per_run = 1 if job.tpu.use_tpu else inputs.predict_batches_per_run(job.training.predict_batch_size, count)
    estimator = build_estimator(job, schema, model_dir, predict_batches_per_run=per_run)
    checkpoint = checkpoint_path or checkpoints.selected_checkpoint(model_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint in model_dir={model_dir!r} to predict with; train first")
    batches = estimator.predict(input_fn, predict_keys=fetched, yield_single_examples=False, checkpoint_path=checkpoint)
    # The generator keeps the estimator's graph as this thread's default graph between batches, which would
    # break the eager host pass; a producer thread also overlaps the model with formatting and writing.
    return checkpoint, in_background(batches, depth=max(2, QUEUE_DEPTH // per_run))


def fetched_keys(schema: Schema) -> List[str]:
    """What batch prediction fetches from the estimator per batch: the outputs, the row markers and the
    packed keys; not the logits."""
    return [*output_keys(schema), INDEX_FEATURE, PADDING_FEATURE, KEY_BYTES_FEATURE]
