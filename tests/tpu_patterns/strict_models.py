"""Small model_fns and input_fns with the patterns of the canonical public TPUEstimator models (written here, no
code copied), for strict mode's regression tests (tests/lib/strict/test_patterns.py):

- `schedule_model_fn`: a learning rate read from the global step (linear warmup, then polynomial decay), trained
  through `CrossShardOptimizer.minimize`: no finding.
- `bert_like_model_fn_builder`: BERT's training step: gradients from `tf.gradients`, clipped by global norm, handed
  to `CrossShardOptimizer(an Adam-type optimizer with decoupled weight decay).apply_gradients`, the global step
  incremented by the model_fn; dropout and layer norm; the label read from `features["label_ids"]` (one dict,
  no labels); eval metrics weighted by `is_real_example`. One `differs` finding (the update sums the shards'
  gradients). `use_sgd=True` swaps in plain SGD (still one `differs`: the step is num_replicas times too large);
  `cross_shard=False` leaves CrossShardOptimizer out (one `fails` per variable).
- `resnet_like_model_fn`: NHWC convolutions with fused batch norm (`training=` the mode), the moving averages
  updated through UPDATE_OPS, momentum with a step-wise schedule; a plain `EstimatorSpec` in PREDICT.
- `mnist_like_model_fn`: the image tensor itself as `features` (not a dict) and an int64 label, uncast: one
  `note` per mode that reads the label.

Every input_fn yields ROWS rows in batches of `params['batch_size']` (drop_remainder) and knows its length.
"""

from __future__ import annotations

from typing import Callable, Dict

import numpy as np
import tensorflow as tf
from absl import flags

ModeKeys = tf.estimator.ModeKeys
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec
ROWS = 32  # 16 batches of 2 per replica: a multiple of the 8 replicas of one host
SEQ_LENGTH, VOCAB_SIZE, HIDDEN, NUM_LABELS = 6, 12, 8, 2
IMAGE = 4  # images IMAGE x IMAGE x 1


# -- inputs -------------------------------------------------------------------------------------------------------
def _batched(mode: str, element: Callable[[np.random.Generator], object]) -> Callable:
    """An input_fn of ROWS rows (`element(rng)` makes them), shuffled and repeated in TRAIN, batched by
    params['batch_size'] with drop_remainder."""

    def input_fn(params):
        rows = element(np.random.default_rng(7))
        dataset = tf.data.Dataset.from_tensor_slices(rows)
        if mode == ModeKeys.TRAIN:
            dataset = dataset.shuffle(ROWS, seed=1).repeat()
        return dataset.batch(params["batch_size"], drop_remainder=True)

    return input_fn


def token_input_fn(mode: str, label: bool = True) -> Callable:
    """BERT's layout: one dict of int32 tensors, the label inside it as "label_ids" (none in PREDICT, or when
    `label` is False), with `is_real_example`."""

    def rows(rng):
        out = {
            "input_ids": rng.integers(0, VOCAB_SIZE, (ROWS, SEQ_LENGTH)).astype(np.int32),
            "input_mask": np.ones((ROWS, SEQ_LENGTH), np.int32),
            "is_real_example": np.ones([ROWS], np.int32),
        }
        if label and mode != ModeKeys.PREDICT:
            out["label_ids"] = rng.integers(0, NUM_LABELS, [ROWS]).astype(np.int32)
        return out

    return _batched(mode, rows)


def image_input_fn(mode: str, label_dtype=np.int32, as_dict: bool = True) -> Callable:
    """(features, label) of IMAGE x IMAGE x 1 float32 images: a dict {"image": ...}, or the image tensor itself
    (`as_dict=False`, as MNIST's input_fn yields it); the label of `label_dtype` (int64: MNIST's, uncast); the
    image alone in PREDICT."""

    def rows(rng):
        images = rng.normal(size=(ROWS, IMAGE, IMAGE, 1)).astype(np.float32)
        features = {"image": images} if as_dict else images
        if mode == ModeKeys.PREDICT:
            return features
        return features, rng.integers(0, NUM_LABELS, [ROWS]).astype(label_dtype)

    return _batched(mode, rows)


def input_fns(builder: Callable, **kwargs) -> Dict[str, Callable]:
    """check_model's keyword arguments: the three modes' input_fns from `builder(mode, **kwargs)`."""
    return {
        "train_input_fn": builder(ModeKeys.TRAIN, **kwargs),
        "eval_input_fn": builder(ModeKeys.EVAL, **kwargs),
        "predict_input_fn": builder(ModeKeys.PREDICT, **kwargs),
    }


# -- a learning rate read from the global step ------------------------------------------------------------------
def warmup_polynomial_decay(base: float, num_train_steps: int, num_warmup_steps: int) -> tf.Tensor:
    """Linear warmup to `base` over `num_warmup_steps`, then polynomial decay to 0 at `num_train_steps`; reads
    the global step TPUEstimator creates before it calls the model_fn."""
    step = tf.compat.v1.train.get_global_step()
    decayed = tf.compat.v1.train.polynomial_decay(base, step, num_train_steps, end_learning_rate=0.0, power=1.0)
    step_float = tf.cast(step, tf.float32)
    warmup = base * step_float / float(num_warmup_steps)
    in_warmup = tf.cast(step_float < float(num_warmup_steps), tf.float32)
    return in_warmup * warmup + (1.0 - in_warmup) * decayed


def _mean_loss_metric_fn(per_example_loss):
    return {"mean_loss": tf.compat.v1.metrics.mean(per_example_loss)}


def schedule_model_fn(features, labels, mode, params):
    """A linear classifier of the image trained with `warmup_polynomial_decay` through
    CrossShardOptimizer.minimize (TPUEstimatorSpec in every mode)."""
    logits = tf.compat.v1.layers.dense(tf.reshape(features["image"], [params["batch_size"], -1]), NUM_LABELS)
    if mode == ModeKeys.PREDICT:
        return TPUEstimatorSpec(mode, predictions={"class_ids": tf.argmax(logits, axis=1, output_type=tf.int32)})
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    loss = tf.reduce_mean(per_example)
    if mode == ModeKeys.EVAL:
        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(_mean_loss_metric_fn, [per_example]))
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(warmup_polynomial_decay(0.1, 100, 10))
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


# -- BERT's training step ---------------------------------------------------------------------------------------
class DecoupledWeightDecayAdam(tf.compat.v1.train.Optimizer):
    """Adam with weight decay added to the update (not to the loss), its moments in variables of its own; like
    BERT's optimizer, `apply_gradients` leaves the global step alone."""

    def __init__(self, learning_rate, weight_decay: float = 0.01, beta_1: float = 0.9, beta_2: float = 0.999):
        super().__init__(use_locking=False, name="DecoupledWeightDecayAdam")
        self.learning_rate, self.weight_decay, self.beta_1, self.beta_2 = learning_rate, weight_decay, beta_1, beta_2

    def _moment(self, variable, which: str):
        name = f"{variable.name.split(':')[0]}/decoupled_adam_{which}"
        shape = variable.shape.as_list()
        return tf.compat.v1.get_variable(name, shape, tf.float32, tf.compat.v1.zeros_initializer(), trainable=False)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        updates = []
        for grad, variable in grads_and_vars:
            if grad is None:
                continue
            m, v = self._moment(variable, "m"), self._moment(variable, "v")
            next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
            next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
            step = next_m / (tf.sqrt(next_v) + 1e-6) + self.weight_decay * variable
            updates += [variable.assign(variable - self.learning_rate * step), m.assign(next_m), v.assign(next_v)]
        return tf.group(*updates, name=name)


def _layer_norm(x, name: str):
    with tf.compat.v1.variable_scope(name):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        gamma = tf.compat.v1.get_variable("gamma", [x.shape[-1]], initializer=tf.compat.v1.ones_initializer())
        beta = tf.compat.v1.get_variable("beta", [x.shape[-1]], initializer=tf.compat.v1.zeros_initializer())
        return (x - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta


def _weighted_metric_fn(per_example_loss, label_ids, logits, is_real_example):
    weights = tf.cast(is_real_example, tf.float32)
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {
        "eval_accuracy": tf.compat.v1.metrics.accuracy(label_ids, predictions, weights=weights),
        "eval_loss": tf.compat.v1.metrics.mean(per_example_loss, weights=weights),
    }


def _token_logits(features, training: bool):
    """Embeddings (a one-hot product), a dense layer, layer norm, dropout in training, mean-pooled: [B, 2]."""
    table = tf.compat.v1.get_variable("embeddings", [VOCAB_SIZE, HIDDEN])
    one_hot = tf.one_hot(features["input_ids"], VOCAB_SIZE)
    hidden = _layer_norm(tf.compat.v1.layers.dense(tf.einsum("bsv,vh->bsh", one_hot, table), HIDDEN), "layer_norm")
    if training:
        hidden = tf.nn.dropout(hidden, rate=0.1)
    mask = tf.cast(features["input_mask"], tf.float32)[:, :, None]
    pooled = tf.reduce_sum(hidden * mask, axis=1) / tf.reduce_sum(mask, axis=1)
    return tf.compat.v1.layers.dense(pooled, NUM_LABELS, name="classifier")


def _clipped_cross_shard_step(loss, use_tpu: bool, use_sgd: bool, cross_shard: bool):
    """BERT's update: tf.gradients, clip_by_global_norm, apply_gradients, then the global step incremented."""
    step = tf.compat.v1.train.get_global_step()
    rate = warmup_polynomial_decay(1e-3, 100, 10)
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(rate) if use_sgd else DecoupledWeightDecayAdam(rate)
    if use_tpu and cross_shard:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    tvars = tf.compat.v1.trainable_variables()
    grads, _ = tf.clip_by_global_norm(tf.gradients(loss, tvars), clip_norm=1.0)
    update = optimizer.apply_gradients(zip(grads, tvars), global_step=None)
    return tf.group(update, step.assign(step + 1))


def bert_like_model_fn_builder(use_sgd: bool = False, cross_shard: bool = True) -> Callable:
    """A classifier of token ids with BERT's training step (see the module docstring)."""

    def model_fn(features, labels, mode, params):
        logits = _token_logits(features, training=mode == ModeKeys.TRAIN)
        probabilities = tf.nn.softmax(logits, axis=-1)
        if mode == ModeKeys.PREDICT:
            return TPUEstimatorSpec(mode, predictions={"probabilities": probabilities})
        label_ids = features["label_ids"]
        one_hot = tf.one_hot(label_ids, NUM_LABELS)
        per_example = -tf.reduce_sum(one_hot * tf.nn.log_softmax(logits, axis=-1), axis=-1)
        loss = tf.reduce_mean(per_example)
        if mode == ModeKeys.EVAL:
            tensors = [per_example, label_ids, logits, features["is_real_example"]]
            return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(_weighted_metric_fn, tensors))
        train_op = _clipped_cross_shard_step(loss, params["use_tpu"], use_sgd, cross_shard)
        return TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    return model_fn


# -- ResNet: fused batch norm, a plain EstimatorSpec in PREDICT ----------------------------------------------------
def _conv_bn_relu(x, filters: int, training: bool, name: str):
    with tf.compat.v1.variable_scope(name):
        x = tf.compat.v1.layers.conv2d(x, filters, 3, padding="same", use_bias=False, data_format="channels_last")
        x = tf.compat.v1.layers.batch_normalization(x, axis=3, training=training, fused=True)
        return tf.nn.relu(x)


def resnet_like_model_fn(features, labels, mode, params):
    """Two conv + fused batch norm blocks, global average pooling, logits."""
    training = mode == ModeKeys.TRAIN
    x = _conv_bn_relu(features["image"], 4, training, "block1")
    x = _conv_bn_relu(x, 4, training, "block2")
    logits = tf.compat.v1.layers.dense(tf.reduce_mean(x, axis=[1, 2]), NUM_LABELS)
    if mode == ModeKeys.PREDICT:
        predictions = {"classes": tf.argmax(logits, axis=1), "probabilities": tf.nn.softmax(logits)}
        outputs = {"classify": tf.estimator.export.PredictOutput(predictions)}
        return tf.estimator.EstimatorSpec(mode, predictions=predictions, export_outputs=outputs)
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    loss = tf.reduce_mean(per_example)
    if mode == ModeKeys.EVAL:
        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(_mean_loss_metric_fn, [per_example]))
    step = tf.compat.v1.train.get_global_step()
    rate = tf.compat.v1.train.piecewise_constant(step, [30, 60], [0.1, 0.01, 0.001])
    optimizer = tf.compat.v1.train.MomentumOptimizer(rate, momentum=0.9)
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    with tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)):
        train_op = optimizer.minimize(loss, global_step=step)
    return TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


# -- MNIST: the image itself as features, an int64 label ----------------------------------------------------------
def _accuracy_metric_fn(labels, logits):
    return {"accuracy": tf.compat.v1.metrics.accuracy(labels, tf.argmax(logits, axis=1))}


def mnist_like_model_fn(features, labels, mode, params):
    """A dense classifier of the image tensor `features` [B, IMAGE, IMAGE, 1]; `labels` int64 [B]."""
    image = features["image"] if isinstance(features, dict) else features
    hidden = tf.compat.v1.layers.dense(tf.reshape(image, [params["batch_size"], -1]), 8, activation=tf.nn.relu)
    logits = tf.compat.v1.layers.dense(hidden, NUM_LABELS)
    if mode == ModeKeys.PREDICT:
        return TPUEstimatorSpec(mode, predictions={"class_ids": tf.argmax(logits, axis=1)})
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == ModeKeys.EVAL:
        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(_accuracy_metric_fn, [labels, logits]))
    rate = tf.compat.v1.train.exponential_decay(0.05, tf.compat.v1.train.get_global_step(), 100, 0.96)
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(rate)
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


# -- the user's own error -------------------------------------------------------------------------------------------
def missing_key_model_fn(features, labels, mode, params):
    """Reads a feature its input does not have: a KeyError of the model's own code."""
    label_ids = features["label_ids"]  # the line the error names
    return TPUEstimatorSpec(mode, loss=tf.reduce_mean(tf.cast(label_ids, tf.float32)))


UNPARSED_FLAGS = flags.FlagValues()  # MNIST and ResNet read absl FLAGS in their model_fn; never parsed here
flags.DEFINE_float("learning_rate", 0.1, "the learning rate", flag_values=UNPARSED_FLAGS)


def unparsed_flags_model_fn(features, labels, mode, params):
    """Reads an absl flag nobody parsed: absl raises UnparsedFlagAccessError from the model's own line."""
    rate = UNPARSED_FLAGS.learning_rate  # the flag the error names
    return TPUEstimatorSpec(mode, loss=tf.constant(rate))
