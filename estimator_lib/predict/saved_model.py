"""Batch prediction from an exported SavedModel, on the host CPU; no checkpoint or estimator is needed.

The CPU (`serve`) meta graph's `predict` signature is called inside the tf.data pipeline on batches of
serialized Examples, so keys and passthrough columns come from the same batch. The output (`shards`) is the
same as the checkpoint path's (`batch.batch_predict`); `predict.beam` runs the same steps on Apache Beam.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from estimator_lib.export import load_serving_model
from estimator_lib.model import inputs
from estimator_lib.model.inputs import Patterns
from estimator_lib.model.outputs import output_keys
from estimator_lib.predict.columns import Column, host_parse_fn, passthrough_columns
from estimator_lib.predict.jsonl import RowFormatter
from estimator_lib.predict.origins import Origins, record_origins
from estimator_lib.predict.shards import PredictResult, check_num_shards, commit_rows
from estimator_lib.schema import Schema


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
    origins: Optional[Origins] = None,
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
      origins: as for `batch_predict` (None: each row's TFRecord file and record index, one counting pass).
      Others as for `batch_predict`.
    """
    columns = check_saved_model_arguments(schema, batch_size, passthrough, num_shards, num_examples)
    files = inputs.resolve_files(data)
    if origins is None:
        origins = record_origins(files)
        count = origins.count if num_examples is None else num_examples
    else:
        count = inputs.count_records(files) if num_examples is None else num_examples
    model = load_serving_model(export_dir)
    dataset = tf.data.TFRecordDataset(files)
    if num_examples is not None:  # a stale count fails in the pipeline, before anything is published
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_examples))
    dataset = predicted_batches(dataset.batch(batch_size), model, columns, schema)
    provenance = saved_model_provenance(export_dir, files, columns, batch_size)
    try:
        joined = dataset.as_numpy_iterator()
        formatter = RowFormatter(schema, columns, origins)
        return commit_rows(joined, formatter, count, output_dir, num_shards, provenance)
    finally:
        model.close()


def predicted_batches(
    batches: tf.data.Dataset, model: Any, columns: Sequence[Column], schema: Schema
) -> tf.data.Dataset:
    """Serialized Example batches (string [B]) -> (host columns, model outputs) per batch, on the host CPU.

    The `serve` graph's `predict` signature runs inside this tf.data map: called eagerly instead, the same
    graph gives float32 outputs that differ in the last bits, so every SavedModel path goes through here."""
    host_parse = host_parse_fn(columns, schema)

    @tf.autograph.experimental.do_not_convert  # plain TF calls; nothing for autograph to convert
    def predict(serialized: tf.Tensor):
        outputs = model.signature(examples=serialized)
        return host_parse(serialized), {k: outputs[k] for k in output_keys(schema)}

    dataset = batches.map(predict, num_parallel_calls=inputs.PARSE_PARALLELISM, deterministic=True)
    return dataset.prefetch(inputs.PREFETCH_BATCHES).with_options(inputs.fixed_pipeline_options())


def check_saved_model_arguments(
    schema: Schema, batch_size: int, passthrough: Sequence[str], num_shards: int, num_examples: Optional[int]
) -> Tuple[Column, ...]:
    """Checks `predict_from_saved_model`'s arguments (before any work); returns the passthrough columns."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be a positive integer, e.g. 256")
    columns = passthrough_columns(schema, passthrough)
    check_num_shards(num_shards)
    _check_num_examples(num_examples)
    return columns


def saved_model_provenance(
    export_dir: str, files: List[str], columns: Sequence[Column], batch_size: int
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
