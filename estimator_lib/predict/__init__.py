"""Batch prediction: padded full batches, padding filtered on the host, sharded JSON Lines in input order.

The modules, by role:
  * `sources`: what to score (a prepared split, TFRecords, raw rows), and `score`, which scores any of them.
  * `batch`: the checkpoint path (TPUEstimator), for TFRecords (`batch_predict`) and raw rows (`predict_raw`).
  * `saved_model`: the exported SavedModel's CPU graph in a tf.data pipeline (`predict_from_saved_model`);
    `beam`: the same on Apache Beam.
  * `columns`: the key and passthrough columns, resolved against the schema and read on the host.
  * `keys`: prediction batches joined to their keys and passthrough columns.
  * `jsonl`: rows formatted as JSON Lines (`RowFormatter`, `json_numbers`).
  * `shards`: the output: sharded, checksummed, atomically published, with its manifest (`publish`).
  * `verify`: a committed output checked and read back.
  * `rows`, `background`: host batches sliced and joined; an iterator consumed in a producer thread.
  * `skew`: the scored rows' profile against the model's training profile (skew.json), before anything is
    scored; `skew_beam`: that profile computed by Beam workers, merged from their summaries.
"""

from estimator_lib.model.outputs import PredictionError, output_keys, real_rows
from estimator_lib.predict.batch import batch_predict, fetched_keys, predict_raw
from estimator_lib.predict.saved_model import predict_from_saved_model
from estimator_lib.predict.shards import PredictResult, shard_name, shard_sizes
from estimator_lib.predict.sources import PredictionSource, prediction_source, score
from estimator_lib.predict.verify import read_predictions, verify_output

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
