"""A model with the input contract of google-research/bert's classifier, written here for the tests (not its
code): one features dict holding the label (`label_ids`) and `is_real_example`, which the model_fn reads itself
(`labels` is None, as TPUEstimator passes it when the input yields only features); a metric_fn weighted by
`is_real_example`; a learning rate decaying linearly over `params['train_steps']`.

Records: `input_ids` and `input_mask` (int64 lists of SEQ), `label_ids` and `is_real_example` (int64 scalars);
the spec gives them to the model as int32, as BERT's input_fn casts them. A class-c sequence draws most of its
tokens from its own band of the vocabulary.
"""

from __future__ import annotations

from typing import Dict

import numpy as np
import tensorflow as tf

SEQ, VOCAB, CLASSES = 12, 32, 2
LABEL = "label_ids"
SPEC = {
    "features": {
        "input_ids": {"dtype": "int32", "shape": [SEQ]},
        "input_mask": {"dtype": "int32", "shape": [SEQ]},
        "is_real_example": {"dtype": "int32", "shape": []},
        LABEL: {"dtype": "int32", "shape": []},
    },
    "label_in_features": True,
}
ModeKeys = tf.estimator.ModeKeys
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec


def _ints(values) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))


def _example(ids: np.ndarray, length: int, label: int, real: bool, with_label: bool) -> bytes:
    feature = {
        "input_ids": _ints(np.pad(ids, (0, SEQ - len(ids)))),
        "input_mask": _ints([1] * length + [0] * (SEQ - length)),
        "is_real_example": _ints([int(real)]),
    }
    if with_label:
        feature[LABEL] = _ints([label])
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_records(path: str, count: int, seed: int, with_label: bool = True, fake: int = 0) -> np.ndarray:
    """`count` records at `path` (without `label_ids` when not `with_label`), then `fake` all-zero rows with
    `is_real_example` 0 (BERT pads its eval set so); returns the real records' labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, count)
    with tf.io.TFRecordWriter(path) as writer:
        for label in labels:
            length = int(rng.integers(4, SEQ + 1))
            own = rng.integers(1 + 10 * label, 11 + 10 * label, length)
            ids = np.where(rng.random(length) < 0.7, own, rng.integers(21, VOCAB, length))
            writer.write(_example(ids, length, int(label), True, with_label))
        for _ in range(fake):
            writer.write(_example(np.zeros(SEQ, np.int64), 0, 0, False, with_label))
    return labels


def create_model(input_ids: tf.Tensor, input_mask: tf.Tensor, hidden_size: int) -> tf.Tensor:
    """int32 [B, SEQ] ids and mask -> logits float32 [B, CLASSES]: the masked mean of token embeddings."""
    table = tf.compat.v1.get_variable("embeddings", [VOCAB, hidden_size])
    embedded = tf.gather(table, input_ids)
    mask = tf.cast(input_mask, tf.float32)[:, :, None]
    pooled = tf.reduce_sum(embedded * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
    return tf.compat.v1.layers.dense(pooled, CLASSES, name="classifier")


def metric_fn(per_example_loss, label_ids, logits, is_real_example) -> Dict:
    """Runs on the host: accuracy and mean loss, each row weighted by its `is_real_example`."""
    weights = tf.cast(is_real_example, tf.float32)
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {
        "eval_accuracy": tf.compat.v1.metrics.accuracy(label_ids, predictions, weights=weights),
        "eval_loss": tf.compat.v1.metrics.mean(per_example_loss, weights=weights),
    }


def model_fn(features, labels, mode, params):
    """`features`: int32 [B, SEQ] `input_ids` and `input_mask`, int32 [B] `label_ids` and `is_real_example`."""
    if labels is not None:
        raise ValueError("labels must be None: this model reads its label from features['label_ids']")
    label_ids = features[LABEL]
    logits = create_model(features["input_ids"], features["input_mask"], params["hidden_size"])
    log_probs = tf.nn.log_softmax(logits)
    per_example_loss = -tf.reduce_sum(tf.one_hot(label_ids, CLASSES) * log_probs, axis=-1)
    loss = tf.reduce_mean(per_example_loss)
    if mode == ModeKeys.PREDICT:
        return TPUEstimatorSpec(mode, predictions={"probabilities": tf.exp(log_probs)})
    if mode == ModeKeys.EVAL:
        tensors = [per_example_loss, label_ids, logits, features["is_real_example"]]
        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, tensors))
    step = tf.compat.v1.train.get_global_step()
    rate = tf.compat.v1.train.polynomial_decay(params["learning_rate"], step, params["train_steps"], 0.0)
    optimizer = tf.compat.v1.train.AdamOptimizer(rate)
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    return TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, step))
