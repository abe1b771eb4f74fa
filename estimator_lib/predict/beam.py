"""Batch prediction from an exported SavedModel as an Apache Beam pipeline (`engine="beam"`), with Beam's
RunInference: the local runner in tests and local runs, Dataflow at scale. Everything runs on the workers'
CPUs: the `serve` (CPU) meta graph, loaded once per worker process.

The output is byte-identical to `saved_model.predict_from_saved_model`'s for the same input: the same batches (rows
[k * batch_size, (k + 1) * batch_size) of the files in sorted order, across file ends, so the model sees the
same matrices), the same signature, the same JSON Lines formatter, the same shard ranges and manifest, and
the same atomic commit (`shards.publish`).

    files --> count records per file (side input: each file's first row, the shard ranges)
    files --> read a file (one worker per file) --> (batch index, (row, record)) --GroupByKey--> one batch
          --> RunInference(KeyedModelHandler(SavedModelHandler))  [signature + host columns, per batch]
          --> format rows, cut at shard ends --> (shard, piece) --GroupByKey--> write the shard (one worker)

Each shard is written by one worker, in row order; the launcher then moves the shards into its staging
directory (with the DirectRunner the workers write there directly) and commits them with the manifest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import queue
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf

from estimator_lib import storage
from estimator_lib.config import JobConfig
from estimator_lib.config.beam import BeamConfig
from estimator_lib.data.beam import (
    beam,
    beam_passes,
    read_pickles,
    require_beam,
    run_pipeline,
    work_directory,
    write_pickle,
)
from estimator_lib.data.prepare import PrepareResult, encode_for_scoring
from estimator_lib.export import export_model, load_serving_model
from estimator_lib.model import inputs
from estimator_lib.model.outputs import PredictionError
from estimator_lib.predict.batch import encoded_origins, raw_record
from estimator_lib.predict.columns import Column
from estimator_lib.predict.jsonl import RowFormatter
from estimator_lib.predict.origins import KeyedOrigins, Origins, RecordOrigins
from estimator_lib.predict.saved_model import check_saved_model_arguments, predicted_batches, saved_model_provenance
from estimator_lib.predict.shards import PredictResult, formatted_pieces, publish, shard_name, shard_sizes
from estimator_lib.predict.sources import encoded_rows_uri, prediction_source, scoring_options, split_origins
from estimator_lib.schema import Schema

EXPORT_SUFFIX = "-saved_model"


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What the workers need: the model, the schema and columns, the batch size, the shards, the input files
    and the prepared rows' origins (None: TFRecords, placed by file and record index from the layout)."""

    export_dir: str
    schema: Schema
    columns: Tuple[Column, ...]
    batch_size: int
    num_shards: int
    shard_dir: str
    work: str
    files: Tuple[str, ...]
    origins: Optional[KeyedOrigins]


def predict_from_saved_model(
    export_dir: str,
    schema: Schema,
    data: inputs.Patterns,
    output_dir: str,
    *,
    batch_size: int = 256,
    num_examples: Optional[int] = None,
    passthrough: Sequence[str] = (),
    num_shards: int = 1,
    beam_config: Optional[BeamConfig] = None,
    provenance: Optional[Dict[str, Any]] = None,
    origins: Optional[KeyedOrigins] = None,
) -> PredictResult:
    """`saved_model.predict_from_saved_model` on Apache Beam: the same arguments, the same output.

    Args:
      export_dir, schema, data, output_dir, batch_size, num_examples, passthrough, num_shards: as for
        `saved_model.predict_from_saved_model`. A wrong `num_examples` fails and publishes nothing.
      beam_config: where the pipeline runs (None: the DirectRunner on this machine).
      provenance: entries added to the manifest (None adds none, keeping it identical to the in-process one).
      origins: prepared rows' origins, as for `saved_model.predict_from_saved_model`; None places each row by
        its TFRecord file and record index (from the per-file counts the pipeline makes anyway).
    """
    require_beam()
    config = beam_config or BeamConfig()
    columns = check_saved_model_arguments(schema, batch_size, passthrough, num_shards, num_examples)
    files = inputs.resolve_files(data)
    record = {**saved_model_provenance(export_dir, files, columns, batch_size), **(provenance or {})}
    fields = RowFormatter(schema, columns, RecordOrigins(files, []) if origins is None else origins).fields

    def write_shards(staging: str) -> List[Dict[str, Any]]:
        with work_directory(config, "predict") as work:
            shard_dir = staging if config.is_local else storage.join(work, "shards")
            plan = _Plan(export_dir, schema, columns, batch_size, num_shards, shard_dir, work, tuple(files), origins)
            run_pipeline(lambda p: _prediction_pipeline(p, files, plan), config, "batch-predict")
            return _collect_shards(plan, staging, num_examples)

    return publish(write_shards, fields, output_dir, num_shards, record)


def score(
    job: JobConfig,
    prepared: PrepareResult,
    model_dir: str,
    data: str,
    output_dir: str,
    beam_config: Optional[BeamConfig] = None,
) -> PredictResult:
    """`predict.score` on Apache Beam: exports the model's CPU SavedModel beside `output_dir`
    (`<output_dir>-saved_model/<version>`, verified as the export stage verifies it), then scores what
    `data` names with it. Raw CSV / JSON Lines rows are encoded through the prepared schema on Beam first
    (kept in `<output_dir>-rows`). Predictions equal the checkpoint's to 1e-5 (the export's verification)
    and are byte-identical to `saved_model.predict_from_saved_model` with the same export.

    Args:
      job: the trained model's job config, placed on the host CPU (`tpu.use_tpu=False`).
      prepared, model_dir, data, output_dir: as for `predict.score`.
      beam_config: where the pipelines run (None: the DirectRunner on this machine).
    """
    source = prediction_source(data, prepared)
    uri, count, extra, origins = source.uri, source.count, {}, split_origins(source, prepared)
    if source.raw:
        with beam_passes(beam_config or BeamConfig()) as passes:
            rows = encode_for_scoring(
                source.uri, prepared.schema, encoded_rows_uri(output_dir), passes=passes, **scoring_options(prepared)
            )
        uri, count = rows.files, rows.count
        extra, origins = {"raw": raw_record(rows, encoded_rows_uri(output_dir))}, encoded_origins(rows)
    exported = export_model(job, prepared.schema, model_dir, output_dir.rstrip("/") + EXPORT_SUFFIX, verify_rows=uri)
    return predict_from_saved_model(
        exported.export_dir,
        prepared.schema,
        uri,
        output_dir,
        batch_size=job.training.predict_batch_size,
        num_examples=count,
        beam_config=beam_config,
        provenance=extra,
        origins=origins,
    )


# -- the pipeline ---------------------------------------------------------------------------------------------
def _prediction_pipeline(pipeline: Any, files: List[str], plan: _Plan) -> None:
    indexed = pipeline | "Files" >> beam.Create(list(enumerate(files)))
    counts = indexed | "SpreadCount" >> beam.Reshuffle() | "Count" >> beam.Map(_count)
    layout = beam.pvalue.AsSingleton(counts | "Layout" >> beam.combiners.ToList() | beam.Map(_layout, plan))
    _ = (
        indexed
        | "SpreadRead" >> beam.Reshuffle()
        | "Read" >> beam.FlatMap(_batch_rows, layout, plan.batch_size)
        | "Batch" >> beam.GroupByKey()
        | "Order" >> beam.Map(_ordered_batch, plan.batch_size)
        | "Predict" >> RunInference(KeyedModelHandler(SavedModelHandler(plan)))
        | "Format" >> beam.FlatMap(_pieces, layout, plan)
        | "Shard" >> beam.GroupByKey()
        | "Write" >> beam.Map(_write_shard, plan)
    )


def _count(element: Tuple[int, str]) -> Tuple[int, int]:
    index, path = element
    return index, inputs.count_records([path])


def _layout(counts: List[Tuple[int, int]], plan: _Plan) -> Dict[str, Any]:
    """Each file's first row, the row count, and the shards' ends, from the per-file record counts."""
    per_file = [n for _, n in sorted(counts)]
    starts = [sum(per_file[:i]) for i in range(len(per_file))]
    total = sum(per_file)
    ends, end = [], 0
    for size in shard_sizes(total, plan.num_shards):
        end += size
        ends.append(end)
    write_pickle(storage.join(plan.work, "count.pkl"), total)
    return {"starts": starts, "count": total, "ends": ends, "per_file": per_file}


def _batch_rows(element: Tuple[int, str], layout: Dict[str, Any], batch_size: int) -> Iterator[Tuple[int, Tuple]]:
    """A file's records as (batch index, (input row, serialized Example)), batch k being rows
    [k * batch_size, (k + 1) * batch_size) of all files in order, as `predict_from_saved_model` batches them."""
    index, path = element
    row = layout["starts"][index]
    for serialized in tf.data.TFRecordDataset([path]).as_numpy_iterator():
        yield row // batch_size, (row, serialized)
        row += 1


def _ordered_batch(element: Tuple[int, Any], batch_size: int) -> Tuple[int, Tuple[int, List[bytes]]]:
    """(batch index, (first row, serialized Examples in row order))."""
    index, rows = element
    ordered = sorted(rows, key=lambda r: r[0])
    return index, (index * batch_size, [serialized for _, serialized in ordered])


if beam is not None:
    from apache_beam.ml.inference.base import KeyedModelHandler, ModelHandler, PredictionResult, RunInference

    class SavedModelHandler(ModelHandler):
        """RunInference's model handler for our export: loads the `serve` meta graph once per worker process
        (`export.load_serving_model`) and calls its `predict` signature on one whole batch at a time.

        An element is a ready batch (first row, serialized Examples); RunInference is told to pass one
        element per call so the signature sees exactly the rows `predict_from_saved_model` gives it, through
        the same tf.data map (`saved_model.predicted_batches`). The result is (host columns, model outputs) as
        numpy arrays, ready for the JSON Lines formatter.
        """

        def __init__(self, plan: _Plan):
            super().__init__(min_batch_size=1, max_batch_size=1)
            self._plan = plan

        def load_model(self) -> "_FedPredictor":
            return _FedPredictor(load_serving_model(self._plan.export_dir), self._plan)

        def run_inference(
            self,
            batch: Sequence[Tuple[int, List[bytes]]],
            model: "_FedPredictor",
            inference_args: Optional[Dict] = None,
        ) -> Iterator[PredictionResult]:
            for first_row, records in batch:
                yield PredictionResult((first_row, len(records)), model.predict(records))

        def get_num_bytes(self, batch: Sequence[Tuple[int, List[bytes]]]) -> int:
            return sum(len(r) for _, records in batch for r in records)


class _FedPredictor:
    """`saved_model.predicted_batches` over batches handed in one at a time: one tf.data pipeline per worker process
    (building one per batch would trace the signature again for every batch), fed through a queue."""

    def __init__(self, model: Any, plan: _Plan):
        self._model, self._queue, self._lock = model, queue.Queue(), threading.Lock()
        fed = tf.data.Dataset.from_generator(self._batches, output_signature=tf.TensorSpec([None], tf.string))
        self._outputs = predicted_batches(fed, model, plan.columns, plan.schema).as_numpy_iterator()

    def _batches(self) -> Iterator[List[bytes]]:
        while True:
            yield self._queue.get()

    def predict(self, records: List[bytes]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        with self._lock:  # RunInference may call from several threads; batch in, its result out
            self._queue.put(records)
            return next(self._outputs)


def _pieces(element: Tuple[int, Any], layout: Dict[str, Any], plan: _Plan) -> Iterator[Tuple[int, Tuple]]:
    """One predicted batch as formatted JSON Lines pieces keyed by shard: (shard, (first row, rows, bytes))."""
    _, result = element
    (first_row, _), (host, outputs) = result.example, result.inference
    formatter = RowFormatter(plan.schema, plan.columns, _origins(plan, layout))
    row = first_row
    for shard, rows, data in formatted_pieces(host, outputs, formatter, first_row, layout["ends"]):
        yield shard, (row, rows, data)
        row += rows


def _origins(plan: _Plan, layout: Dict[str, Any]) -> Origins:
    """The rows' origins: the prepared rows' (by key), else each TFRecord row's file and record index."""
    return RecordOrigins(plan.files, layout["per_file"]) if plan.origins is None else plan.origins


def _write_shard(element: Tuple[int, Any], plan: _Plan) -> None:
    """Writes one shard's pieces in row order (one worker per shard) and records its manifest entry."""
    shard, pieces = element
    name = shard_name(shard, plan.num_shards)
    digest, size, rows = hashlib.sha256(), 0, 0
    ordered = sorted(pieces, key=lambda p: p[0])
    data = b"".join(p[2] for p in ordered)
    digest.update(data)
    size, rows = len(data), sum(p[1] for p in ordered)
    storage.write_bytes(storage.join(plan.shard_dir, name), data)
    entry = {"file": name, "rows": rows, "bytes": size, "sha256": digest.hexdigest()}
    write_pickle(storage.join(plan.work, "shards", f"{shard:05d}.pkl"), entry)


def _collect_shards(plan: _Plan, staging: str, num_examples: Optional[int]) -> List[Dict[str, Any]]:
    """The shards' manifest entries in order, each shard in `staging`; shards without rows are written empty."""
    count = next(read_pickles([storage.join(plan.work, "count.pkl")]))
    if num_examples is not None and count != num_examples:
        raise PredictionError(
            f"num_examples={num_examples} but the inputs hold {count} records; pass the right count (prepare's "
            "manifest) or None to count"
        )
    entries = []
    for shard, planned in enumerate(shard_sizes(count, plan.num_shards)):
        name = shard_name(shard, plan.num_shards)
        entry_uri = storage.join(plan.work, "shards", f"{shard:05d}.pkl")
        if storage.exists(entry_uri):
            entry = next(read_pickles([entry_uri]))
            if plan.shard_dir != staging:
                storage.download_file(storage.join(plan.shard_dir, name), os.path.join(staging, name))
        else:
            open(os.path.join(staging, name), "wb").close()
            entry = {"file": name, "rows": 0, "bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()}
        if entry["rows"] != planned:
            raise PredictionError(f"shard {shard} holds {entry['rows']} rows, {planned} were planned")
        entries.append(entry)
    return entries
