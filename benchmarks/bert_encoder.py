"""A BERT-style encoder fine-tuned as a sentence classifier: a TPUEstimator model_fn for `bench_preflight.py`.

The google-research/bert README's max-batch table ("Out-of-memory issues") was measured with BERT's fine-tuning
scripts (`run_classifier.py`, `run_squad.py`), float32, Adam; this is that training graph, written here: token,
position (up to `max_positions`) and segment embeddings summed, layer-normed and dropped out; `layers` post-norm
Transformer layers (multi-head self-attention over the unmasked tokens, a feed-forward block of `4 * hidden` units
with the tanh approximation of GELU, dropout after each, residual and layer norm); the first token pooled by a
tanh layer; a softmax classifier. Dropout (0.1) is on in TRAIN only. The word embedding is read with a gather, as
the table's GPU runs did (`use_one_hot_embeddings=False`), so its gradient is the full [vocab, hidden] matrix.
Training clips the gradients to a global norm of 1.0 and applies them with `AdamWeightDecay` (Adam's two slots
per variable, m and v; decoupled weight decay; no bias correction), through `CrossShardOptimizer` on a TPU.
Omitted, as they hold no memory that scales with the batch: the warm-up and decay of the learning rate.

Features (int32 [B, seq_length] each): `input_ids`, `input_mask` (1 for a real token), `segment_ids`; the label
`label_ids` is int32 [B]. `input_fn_builder` makes such batches from random ids (the memory of a step does not
depend on the values).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict

import numpy as np
import tensorflow as tf

ModeKeys = tf.estimator.ModeKeys
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec
_LN_EPSILON = 1e-12


@dataclasses.dataclass(frozen=True)
class BertSize:
    """The encoder's shape: `layers` Transformer layers of width `hidden` with `heads` attention heads."""

    layers: int
    hidden: int
    heads: int
    vocab_size: int = 30522
    max_positions: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} is not divisible by heads={self.heads}; use a multiple of it")

    @property
    def intermediate(self) -> int:
        return 4 * self.hidden


BASE = BertSize(layers=12, hidden=768, heads=12)  # 110M parameters (the README's BERT-Base)
LARGE = BertSize(layers=24, hidden=1024, heads=16)  # 340M parameters (BERT-Large)


def _initializer():
    return tf.compat.v1.truncated_normal_initializer(stddev=0.02)


def _dense(x: tf.Tensor, units: int, name: str, activation: Callable = None) -> tf.Tensor:
    """x float32 [N, in] -> [N, units]: x @ kernel + bias."""
    with tf.compat.v1.variable_scope(name):
        kernel = tf.compat.v1.get_variable("kernel", [x.shape[-1], units], initializer=_initializer())
        bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
        y = tf.matmul(x, kernel) + bias
    return activation(y) if activation else y


def _layer_norm(x: tf.Tensor, name: str) -> tf.Tensor:
    """Normalises x's last dimension, then scales and shifts it by learned `gamma` and `beta`."""
    with tf.compat.v1.variable_scope(name):
        size = x.shape[-1]
        gamma = tf.compat.v1.get_variable("gamma", [size], initializer=tf.compat.v1.ones_initializer())
        beta = tf.compat.v1.get_variable("beta", [size], initializer=tf.compat.v1.zeros_initializer())
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + _LN_EPSILON) * gamma + beta


def _dropout(x: tf.Tensor, rate: float, training: bool) -> tf.Tensor:
    return tf.nn.dropout(x, rate=rate) if training and rate > 0 else x


def _gelu(x: tf.Tensor) -> tf.Tensor:
    return tf.nn.gelu(x, approximate=True)


def _self_attention(x, mask_bias, batch: int, seq: int, size: BertSize, training: bool) -> tf.Tensor:
    """Multi-head self-attention: x float32 [B*S, D], mask_bias float32 [B, 1, 1, S] (0 or -10000) -> [B*S, D]."""
    width = size.hidden // size.heads

    def split_heads(t):  # [B*S, D] -> [B, heads, S, width]
        return tf.transpose(tf.reshape(t, [batch, seq, size.heads, width]), [0, 2, 1, 3])

    q, k, v = (split_heads(_dense(x, size.hidden, name)) for name in ("query", "key", "value"))
    scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(width)) + mask_bias
    probs = _dropout(tf.nn.softmax(scores), size.dropout, training)  # [B, heads, S, S]
    context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])
    return tf.reshape(context, [batch * seq, size.hidden])


def _layer(x, mask_bias, batch: int, seq: int, size: BertSize, training: bool) -> tf.Tensor:
    """One post-norm Transformer layer: x float32 [B*S, D] -> [B*S, D]."""
    with tf.compat.v1.variable_scope("attention"):
        context = _self_attention(x, mask_bias, batch, seq, size, training)
        attended = _dropout(_dense(context, size.hidden, "output"), size.dropout, training)
        x = _layer_norm(attended + x, "output_norm")
    inner = _dense(x, size.intermediate, "intermediate", _gelu)
    out = _dropout(_dense(inner, size.hidden, "output"), size.dropout, training)
    return _layer_norm(out + x, "output_norm")


def _embeddings(input_ids, segment_ids, size: BertSize, training: bool) -> tf.Tensor:
    """int32 [B, S] ids and segments -> float32 [B*S, D]."""
    seq = input_ids.shape[1]
    if seq > size.max_positions:
        raise ValueError(f"seq_length={seq} exceeds max_positions={size.max_positions}; use at most that many")
    with tf.compat.v1.variable_scope("embeddings"):
        words = tf.compat.v1.get_variable("word_embeddings", [size.vocab_size, size.hidden], initializer=_initializer())
        types = tf.compat.v1.get_variable(
            "token_type_embeddings", [size.type_vocab_size, size.hidden], initializer=_initializer()
        )
        positions = tf.compat.v1.get_variable(
            "position_embeddings", [size.max_positions, size.hidden], initializer=_initializer()
        )
        flat_ids = tf.reshape(input_ids, [-1])
        segments = tf.one_hot(tf.reshape(segment_ids, [-1]), size.type_vocab_size)  # a matmul: small vocabulary
        x = tf.reshape(tf.gather(words, flat_ids) + tf.matmul(segments, types), [-1, seq, size.hidden])
        x = tf.reshape(x + positions[:seq][None], [-1, size.hidden])
        return _dropout(_layer_norm(x, "norm"), size.dropout, training)


def create_model(features: Dict[str, tf.Tensor], size: BertSize, num_labels: int, training: bool) -> tf.Tensor:
    """The encoder and the classifier: features int32 [B, S] -> logits float32 [B, num_labels]."""
    input_ids = features["input_ids"]
    batch, seq = input_ids.shape
    mask = tf.cast(features["input_mask"], tf.float32)[:, None, None, :]  # [B, 1, 1, S]: keys a token may attend
    mask_bias = (1.0 - mask) * -10000.0
    with tf.compat.v1.variable_scope("bert"):
        x = _embeddings(input_ids, features["segment_ids"], size, training)
        for index in range(size.layers):
            with tf.compat.v1.variable_scope(f"layer_{index}"):
                x = _layer(x, mask_bias, batch, seq, size, training)
        first_token = tf.reshape(x, [batch, seq, size.hidden])[:, 0]
        pooled = _dense(first_token, size.hidden, "pooler", tf.tanh)
    pooled = _dropout(pooled, size.dropout, training)
    return _dense(pooled, num_labels, "classifier")


class AdamWeightDecay(tf.compat.v1.train.Optimizer):
    """Adam with decoupled weight decay and no bias correction, as BERT fine-tunes: per variable two slots, m and
    v, of its shape; `variable -= lr * (m / (sqrt(v) + epsilon) + decay * variable)`, the decay term only for
    variables whose name contains none of `no_decay` (layer norms, biases)."""

    def __init__(self, learning_rate, weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6, no_decay=()):
        super().__init__(use_locking=False, name="AdamWeightDecay")
        self._lr, self._decay, self._beta1, self._beta2, self._epsilon = (
            learning_rate,
            weight_decay,
            beta1,
            beta2,
            epsilon,
        )
        self._no_decay = tuple(no_decay)

    def _create_slots(self, var_list):
        for var in var_list:
            self._zeros_slot(var, "m", "adam_m")
            self._zeros_slot(var, "v", "adam_v")

    def _resource_apply_dense(self, grad, var):
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        next_m = self._beta1 * m + (1.0 - self._beta1) * grad
        next_v = self._beta2 * v + (1.0 - self._beta2) * tf.square(grad)
        update = next_m / (tf.sqrt(next_v) + self._epsilon)
        if not any(part in var.name for part in self._no_decay):
            update += self._decay * var
        return tf.group(var.assign_sub(self._lr * update), m.assign(next_m), v.assign(next_v))

    def _resource_apply_sparse(self, grad, var, indices):
        raise NotImplementedError("AdamWeightDecay applies dense gradients only: densify IndexedSlices first")


def _train_op(loss: tf.Tensor, learning_rate: float, use_tpu: bool) -> tf.Operation:
    """Gradients (summed across replicas on a TPU), clipped to a global norm of 1.0, applied by AdamWeightDecay."""
    optimizer = AdamWeightDecay(learning_rate, no_decay=("norm", "bias"))
    if use_tpu:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    grads_and_vars = optimizer.compute_gradients(loss)
    grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g, _ in grads_and_vars]
    clipped, _ = tf.clip_by_global_norm(grads, clip_norm=1.0)
    variables = [v for _, v in grads_and_vars]
    return optimizer.apply_gradients(zip(clipped, variables), global_step=tf.compat.v1.train.get_global_step())


def model_fn_builder(size: BertSize, num_labels: int = 2, learning_rate: float = 2e-5) -> Callable:
    """A TPUEstimator model_fn(features, labels, mode, params) fine-tuning a `size` encoder on `num_labels`
    classes; it reads `params['use_tpu']` only."""

    def model_fn(features, labels, mode, params):
        training = mode == ModeKeys.TRAIN
        logits = create_model(features, size, num_labels, training)
        log_probs = tf.nn.log_softmax(logits)
        if mode == ModeKeys.PREDICT:
            return TPUEstimatorSpec(mode, predictions={"probabilities": tf.exp(log_probs)})
        one_hot = tf.one_hot(tf.reshape(labels, [-1]), num_labels)
        per_example_loss = -tf.reduce_sum(one_hot * log_probs, axis=-1)
        loss = tf.reduce_mean(per_example_loss)
        if mode == ModeKeys.EVAL:
            return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(_metric_fn, [per_example_loss, labels, logits]))
        return TPUEstimatorSpec(mode, loss=loss, train_op=_train_op(loss, learning_rate, params.get("use_tpu", False)))

    return model_fn


def _metric_fn(per_example_loss, label_ids, logits):
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {
        "eval_accuracy": tf.compat.v1.metrics.accuracy(tf.reshape(label_ids, [-1]), predictions),
        "eval_loss": tf.compat.v1.metrics.mean(per_example_loss),
    }


def input_fn_builder(seq_length: int, size: BertSize, num_labels: int = 2, rows: int = 64, seed: int = 0) -> Callable:
    """input_fn(params) -> Dataset of ({input_ids, input_mask, segment_ids}, label_ids) batches of
    `params['batch_size']` (drop_remainder: static shapes), repeating `rows` random rows forever; every token real
    (input_mask 1), the second half of each row segment 1."""
    random = np.random.default_rng(seed)
    columns = {
        "input_ids": random.integers(0, size.vocab_size, (rows, seq_length), dtype=np.int32),
        "input_mask": np.ones((rows, seq_length), np.int32),
        "segment_ids": np.repeat((np.arange(seq_length) >= seq_length // 2).astype(np.int32)[None], rows, axis=0),
    }
    label_ids = random.integers(0, num_labels, rows, dtype=np.int32)

    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices((columns, label_ids)).repeat()
        return dataset.batch(params["batch_size"], drop_remainder=True).prefetch(1)

    return input_fn
