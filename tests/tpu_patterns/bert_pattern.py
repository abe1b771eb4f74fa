"""A BERT-style classifier model_fn at toy size, written here with the patterns of google-research/bert's
`run_classifier.py` (no code copied), and a generator of records in its layout.

The patterns: token, position and segment embeddings (`get_variable` + `tf.gather`); one self-attention layer
with layer norms and dropout (TRAIN only); the first token pooled; a learning rate read from the global step
(linear warmup, then polynomial decay); an Adam-type optimizer with decoupled weight decay written as a
`tf.compat.v1.train.Optimizer` whose `apply_gradients` leaves the global step alone; gradients from
`tf.gradients`, clipped by global norm; `CrossShardOptimizer` on a TPU; the step incremented by the model_fn
after the update, in a `tf.group` that does not order it after the learning rate's read (`model_fn`), or
ordered after the update (`ordered_model_fn`). EVAL: `eval_metrics` weighted by `is_real_example`.

Records: `input_ids`, `input_mask`, `segment_ids` (int64 lists, int32 in the spec: [SEQ_LENGTH]) and
`label_ids` (a scalar), `write_records`; `SPEC` is their feature spec (`estimator_lib.config.feature_spec`).
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

ModeKeys = tf.estimator.ModeKeys
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec

SEQ_LENGTH, VOCAB_SIZE, CLS = 8, 20, 1
LABEL = "label_ids"
SPEC = {
    "input_ids": {"dtype": "int32", "shape": [SEQ_LENGTH]},
    "input_mask": {"dtype": "int32", "shape": [SEQ_LENGTH]},
    "segment_ids": {"dtype": "int32", "shape": [SEQ_LENGTH]},
    LABEL: {"dtype": "int32", "shape": []},
}
HPARAMS = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 16,
    "num_heads": 2,
    "max_seq_length": SEQ_LENGTH,
    "num_labels": 2,
    "dropout_rate": 0.1,
    "learning_rate": 0.01,
    "weight_decay_rate": 0.01,
    "num_train_steps": 20,
    "num_warmup_steps": 4,
}
# Variables left out of the weight decay (by a search in their names), as BERT leaves out norms and biases.
NO_DECAY = ("layer_norm", "bias")


def write_records(path: str, count: int, seed: int, with_label: bool = True) -> None:
    """`count` records: [CLS] then 2 to SEQ_LENGTH - 1 tokens of 2..VOCAB_SIZE-1, padded with 0 (mask 0);
    segment 1 on the second half of the real tokens; the label is 1 when token 5 occurs more often than 6."""
    rng = np.random.RandomState(seed)
    ints = lambda values: tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))  # noqa: E731
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(count):
            length = rng.randint(3, SEQ_LENGTH + 1)
            tokens = [CLS] + rng.randint(2, VOCAB_SIZE, size=length - 1).tolist()
            pad = [0] * (SEQ_LENGTH - length)
            feature = {
                "input_ids": ints(tokens + pad),
                "input_mask": ints([1] * length + pad),
                "segment_ids": ints([0] * (length - length // 2) + [1] * (length // 2) + pad),
            }
            if with_label:
                feature[LABEL] = ints([int(tokens.count(5) > tokens.count(6))])
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def _initializer():
    return tf.compat.v1.truncated_normal_initializer(stddev=0.02)


def layer_norm(x: tf.Tensor, name: str) -> tf.Tensor:
    """x float32 [..., H] normalised over H, with a learned scale and offset (named `layer_norm`: no decay)."""
    with tf.compat.v1.variable_scope(name + "/layer_norm"):
        size = x.shape[-1]
        scale = tf.compat.v1.get_variable("gamma", [size], initializer=tf.compat.v1.ones_initializer())
        offset = tf.compat.v1.get_variable("beta", [size], initializer=tf.compat.v1.zeros_initializer())
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + 1e-12) * scale + offset


def _dense(x: tf.Tensor, units: int, name: str, activation=None) -> tf.Tensor:
    return tf.compat.v1.layers.dense(x, units, activation=activation, kernel_initializer=_initializer(), name=name)


def _dropout(x: tf.Tensor, rate: float, training: bool) -> tf.Tensor:
    return tf.nn.dropout(x, rate=rate) if training and rate > 0 else x


def self_attention(x: tf.Tensor, mask: tf.Tensor, params: Dict, training: bool) -> tf.Tensor:
    """Masked multi-head self-attention: x float32 [B, S, H], mask int32 [B, S] -> float32 [B, S, H]."""
    _, length, hidden = x.shape
    heads = params["num_heads"]
    size = hidden // heads

    def split(t):  # [B, S, H] -> [B, heads, S, size]; -1 so the serving graph's unknown batch works
        return tf.transpose(tf.reshape(t, [-1, length, heads, size]), [0, 2, 1, 3])

    q, k, v = (split(_dense(x, hidden, n)) for n in ("query", "key", "value"))
    scores = tf.matmul(q, k, transpose_b=True) * (1.0 / float(size) ** 0.5)
    scores += (1.0 - tf.cast(mask[:, None, None, :], tf.float32)) * -10000.0
    probabilities = _dropout(tf.nn.softmax(scores), params["dropout_rate"], training)
    context = tf.reshape(tf.transpose(tf.matmul(probabilities, v), [0, 2, 1, 3]), [-1, length, hidden])
    return _dense(context, hidden, "output")


def create_model(features: Dict[str, tf.Tensor], params: Dict, training: bool) -> tf.Tensor:
    """features int32 [B, S] (`input_ids`, `input_mask`, `segment_ids`) -> logits float32 [B, num_labels]."""
    hidden, rate = params["hidden_size"], params["dropout_rate"]
    with tf.compat.v1.variable_scope("bert"):
        words = tf.compat.v1.get_variable("word_embeddings", [params["vocab_size"], hidden], initializer=_initializer())
        segments = tf.compat.v1.get_variable("token_type_embeddings", [2, hidden], initializer=_initializer())
        positions = tf.compat.v1.get_variable(
            "position_embeddings", [params["max_seq_length"], hidden], initializer=_initializer()
        )
        x = tf.gather(words, features["input_ids"]) + tf.gather(segments, features["segment_ids"]) + positions
        x = _dropout(layer_norm(x, "embeddings"), rate, training)
        with tf.compat.v1.variable_scope("attention"):
            attended = _dropout(self_attention(x, features["input_mask"], params, training), rate, training)
            x = layer_norm(x + attended, "attention")
        pooled = _dense(x[:, 0], hidden, "pooler", tf.tanh)
    return _dense(_dropout(pooled, rate, training), params["num_labels"], "classifier")


def learning_rate(params: Dict) -> tf.Tensor:
    """The peak rate reached linearly over `num_warmup_steps`, then decayed linearly to 0 at `num_train_steps`,
    both read from the global step (float32 scalar)."""
    step = tf.cast(tf.compat.v1.train.get_global_step(), tf.float32)
    peak = tf.constant(params["learning_rate"], tf.float32)
    total, warmup = float(params["num_train_steps"]), float(params["num_warmup_steps"])
    decayed = peak * (1.0 - tf.minimum(step, total) / total)
    warming = peak * step / warmup if warmup else decayed
    return tf.where(step < warmup, warming, decayed)


class AdamWeightDecay(tf.compat.v1.train.Optimizer):
    """Adam without bias correction, plus `weight_decay_rate` times the variable added to the update (decoupled
    from the gradient's moments), except for variables whose name contains one of `no_decay`.

    `apply_gradients` returns the grouped assignments of every variable and its `m` and `v` slots; it does not
    increment `global_step` (the model_fn does).
    """

    def __init__(
        self,
        rate: tf.Tensor,
        weight_decay_rate: float,
        no_decay: Sequence[str] = NO_DECAY,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        name: str = "AdamWeightDecay",
    ):
        super().__init__(use_locking=False, name=name)
        self._rate, self._decay, self._no_decay = rate, weight_decay_rate, tuple(no_decay)
        self._beta_1, self._beta_2, self._epsilon = beta_1, beta_2, epsilon

    def _decays(self, var: tf.Variable) -> bool:
        return self._decay > 0 and not any(re.search(word, var.name) for word in self._no_decay)

    def _update(self, grad, var: tf.Variable) -> List[tf.Operation]:
        grad = tf.convert_to_tensor(grad)  # the embeddings' IndexedSlices, densified as BERT's optimizer does
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        next_m = self._beta_1 * m + (1.0 - self._beta_1) * grad
        next_v = self._beta_2 * v + (1.0 - self._beta_2) * tf.square(grad)
        update = next_m / (tf.sqrt(next_v) + self._epsilon)
        if self._decays(var):
            update += self._decay * var
        return [var.assign(var - self._rate * update), m.assign(next_m), v.assign(next_v)]

    def apply_gradients(self, grads_and_vars, global_step=None, name: Optional[str] = None) -> tf.Operation:
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        with tf.init_scope():
            for _, var in pairs:
                self._zeros_slot(var, "m", self._name)
                self._zeros_slot(var, "v", self._name)
        with tf.name_scope(name or self._name):
            return tf.group(*[op for g, v in pairs for op in self._update(g, v)], name="update")


def train_op(loss: tf.Tensor, params: Dict, ordered_increment: bool) -> tf.Operation:
    """The update by clipped `tf.gradients`, then the global step's increment: in the same `tf.group` (no order
    against the learning rate's read of the step), or after the update when `ordered_increment`."""
    global_step = tf.compat.v1.train.get_global_step()
    optimizer = AdamWeightDecay(learning_rate(params), params["weight_decay_rate"])
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    tvars = tf.compat.v1.trainable_variables()
    grads, _ = tf.clip_by_global_norm(tf.gradients(loss, tvars), clip_norm=1.0)
    update = optimizer.apply_gradients(zip(grads, tvars), global_step=global_step)
    if ordered_increment:
        with tf.control_dependencies([update]):
            return global_step.assign(global_step + 1).op
    new_global_step = global_step + 1
    return tf.group(update, [global_step.assign(new_global_step)])


def metric_fn(per_example_loss, label_ids, logits, is_real_example) -> Dict[str, Tuple[tf.Tensor, tf.Tensor]]:
    """Runs on the host: accuracy and mean loss over the real examples (weight `is_real_example`)."""
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {
        "eval_accuracy": tf.compat.v1.metrics.accuracy(label_ids, predictions, weights=is_real_example),
        "eval_loss": tf.compat.v1.metrics.mean(per_example_loss, weights=is_real_example),
    }


def model_fn_builder(ordered_increment: bool = False):
    """A TPUEstimator model_fn(features, labels, mode, params); the label from `labels`, else from
    `features["label_ids"]`; `is_real_example` from the features when given, else every row is real."""

    def model_fn(features, labels, mode, params):
        training = mode == ModeKeys.TRAIN
        logits = create_model(features, params, training)
        probabilities = tf.nn.softmax(logits, axis=-1)
        if mode == ModeKeys.PREDICT:
            return TPUEstimatorSpec(mode, predictions={"probabilities": probabilities})
        label_ids = tf.reshape(features[LABEL] if labels is None else labels, [-1])
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        per_example_loss = -tf.reduce_sum(tf.one_hot(label_ids, params["num_labels"]) * log_probs, axis=-1)
        loss = tf.reduce_mean(per_example_loss)
        if training:
            return TPUEstimatorSpec(mode, loss=loss, train_op=train_op(loss, params, ordered_increment))
        is_real = features.get("is_real_example")
        is_real = tf.ones_like(per_example_loss) if is_real is None else tf.cast(is_real, tf.float32)
        return TPUEstimatorSpec(
            mode, loss=loss, eval_metrics=(metric_fn, [per_example_loss, label_ids, logits, is_real])
        )

    return model_fn


model_fn = model_fn_builder()
ordered_model_fn = model_fn_builder(ordered_increment=True)
