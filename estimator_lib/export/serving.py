"""Serving input receivers: what an exported SavedModel accepts, and the host-side conversion it runs.

One receiver gives every exported meta graph (CPU `serve` and TPU `serve,tpu`) two groups of signatures:
  * serialized `tf.Example` input (`examples`: string [B]), the format `prepare` writes: signatures
    `serving_default`, `predict` and `classification` (or `regression`), the last two in TensorFlow Serving's
    Classify/Regress API form;
  * raw feature tensors (`raw:serving_default`, `raw:predict`): one input per feature, named by its safe key,
    float32 [B] for numerics and string [B] for categoricals (the canonical text, "3" for the integer 3).

Both run `estimator_lib.model.transform.to_model_features` on the host CPU before the model, exactly as the input
pipelines do: the vocabulary lookup happens here, because string tensors cannot enter a TPU computation.
The raw inputs are `placeholder_with_default`s over the parsed Example: feeding them cuts the parse out.
"""

from __future__ import annotations

from typing import Callable, Dict

import tensorflow as tf

from estimator_lib.model import transform
from estimator_lib.schema import NUMERIC, Schema

EXAMPLES_INPUT = "examples"
RAW_RECEIVER = "raw"
PREDICT_SIGNATURE = "predict"
RAW_PREDICT_SIGNATURE = f"{RAW_RECEIVER}:{PREDICT_SIGNATURE}"

ServingInputReceiverFn = Callable[[], tf.estimator.export.ServingInputReceiver]


def raw_input_dtypes(schema: Schema) -> Dict[str, tf.DType]:
    """{safe key: dtype} of the raw-feature signature inputs: float32 numerics, string categoricals."""
    return {f.key: tf.float32 if f.kind == NUMERIC else tf.string for f in schema.features}


def serving_input_receiver_fn_builder(schema: Schema) -> ServingInputReceiverFn:
    """Builds the `serving_input_receiver_fn` for `export_saved_model`.

    Args:
      schema: the features the model reads (the job's `model.features` selection of the dataset schema); the
        signatures ask for exactly these.

    Returns:
      A function building a `ServingInputReceiver` whose default receiver is `examples` (string [None]) and
      whose alternative receiver "raw" is {safe key: float32/string [None]}. Features are TPU-safe: float32
      [B] numerics and int32 [B] categorical ids.
    """

    def serving_input_receiver_fn() -> tf.estimator.export.ServingInputReceiver:
        examples = tf.compat.v1.placeholder(tf.string, [None], name=EXAMPLES_INPUT)
        parsed = tf.io.parse_example(examples, transform.parse_spec(schema, with_label=False))
        raw = {
            key: tf.compat.v1.placeholder_with_default(tf.cast(parsed[key], dtype), [None], name=key)
            for key, dtype in raw_input_dtypes(schema).items()
        }
        features = transform.to_model_features(raw, schema)
        return tf.estimator.export.ServingInputReceiver(
            features, {EXAMPLES_INPUT: examples}, receiver_tensors_alternatives={RAW_RECEIVER: raw}
        )

    return serving_input_receiver_fn
