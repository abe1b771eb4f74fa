"""The library around `tf.compat.v1.estimator.tpu.TPUEstimator`: no Kubeflow imports; each layer imports only
from itself and the layers below it (docs/development.md lists them, `tests/test_layer_order.py` holds the code to it).

- `storage`, `fingerprints`, `vocabulary`: files local or on gs://, their content fingerprints, metric names;
- `schema`, `manifest`, `summaries`, `progress`: the data contract, stage records, TensorBoard files, progress;
- `config`: every setting, TensorFlow-free; `cloud`: Vertex AI (costs, Model Registry, Experiments) and alerts;
- `data`: preparation (rows -> TFRecords); `model`: input_fns, model_fns, metric_fns, a user's model_fn wrapped;
- `strict`: TPU-strict mode; `estimator`: the one place TPUEstimator is built;
- `export`, `predict`, `evaluation`, `release`: SavedModels, batch prediction, metrics and blessing, publishing;
- `engine`: each stage as one call on a model source (the built-in families or a user's model_fn), and
  tuning's trials through it.
"""
