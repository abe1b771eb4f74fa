"""Batch prediction: padded full batches, padding filtered on the host, sharded JSON Lines in input order.

`batch` runs the estimator (or a SavedModel) and writes the output; `sources` resolves what to score (a
prepared split, TFRecords, raw rows) and `score` scores any of them.
"""

from estimator_lib.model.outputs import PredictionError, output_keys, real_rows
from estimator_lib.predict.batch import (
    PredictResult,
    batch_predict,
    fetched_keys,
    predict_from_saved_model,
    predict_raw,
    read_predictions,
    shard_name,
    shard_sizes,
    verify_output,
)
from estimator_lib.predict.sources import PredictionSource, prediction_source, score

__all__ = [
    "PredictResult",
    "PredictionError",
    "PredictionSource",
    "batch_predict",
    "fetched_keys",
    "output_keys",
    "predict_from_saved_model",
    "predict_raw",
    "prediction_source",
    "read_predictions",
    "real_rows",
    "score",
    "shard_name",
    "shard_sizes",
    "verify_output",
]
