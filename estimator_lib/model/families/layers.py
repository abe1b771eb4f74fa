"""Building blocks for model families (run inside the TPU computation; static shapes only)."""

from __future__ import annotations

import dataclasses
from typing import Dict, List

import tensorflow as tf

from estimator_lib.config import ModelConfig
from estimator_lib.config.job import MIN_L2
from estimator_lib.schema import Schema

TRAIN = tf.estimator.ModeKeys.TRAIN


@dataclasses.dataclass(frozen=True)
class ModelContext:
    """What a logits function knows besides the features.

    Attributes:
      schema: the features the model uses (already restricted to `ModelConfig.features`) and the label.
      model: the model config (hidden units, embedding width, dropout, l2, free-form `hparams`).
      mode: a `tf.estimator.ModeKeys` value.
      num_logits: width of the logits to return: 1 for binary and regression, K for K classes.
    """

    schema: Schema
    model: ModelConfig
    mode: str
    num_logits: int

    @property
    def training(self) -> bool:
        return self.mode == TRAIN


def _regularizer(ctx: ModelContext):
    """The l2 penalty of a variable, in training only: the one loss it adds to is the training loss."""
    if not ctx.training:
        return None
    # null follows the data where `estimator.train` knows it (`JobConfig.for_data`); a graph built without the
    # data's size (build_estimator, strict.check_model called directly) takes the rule's floor
    l2 = MIN_L2 if ctx.model.l2 is None else ctx.model.l2
    if l2 <= 0:
        return None
    # l2 * sum(w^2) written as 2*l2 * l2_loss(w) (l2_loss = sum(w^2) / 2): the gradient is one multiply, w * 2*l2
    # (bit for bit what the square's gradient gives), not a square, a sum and a tile of [rows, cols] per step.
    return lambda w: (2.0 * l2) * tf.nn.l2_loss(w)


def normalized_numerics(features: Dict[str, tf.Tensor], ctx: ModelContext) -> tf.Tensor:
    """Numeric features standardised with the schema's training statistics: float32 [B, n_numeric]."""
    numeric = ctx.schema.numeric
    if not numeric:
        return None
    # One subtraction and one division over [B, n] (the same float32 values as column by column, in 2 ops not 2n).
    means = tf.constant([f.mean for f in numeric], tf.float32)
    stds = tf.constant([f.std for f in numeric], tf.float32)
    return (tf.stack([features[f.key] for f in numeric], axis=1) - means) / stds


def embeddings(features: Dict[str, tf.Tensor], ctx: ModelContext, dim: int, scope: str) -> List[tf.Tensor]:
    """One float32 [B, dim] embedding per categorical feature (a gather: fine on TPU for small tables)."""
    out = []
    with tf.compat.v1.variable_scope(scope):
        for f in ctx.schema.categorical:
            table = tf.compat.v1.get_variable(
                f.key,
                shape=[f.num_buckets, dim],
                initializer=tf.compat.v1.truncated_normal_initializer(stddev=1.0 / max(dim, 1) ** 0.5),
                regularizer=_regularizer(ctx),
            )
            out.append(tf.gather(table, features[f.key]))
    return out


def dense(x: tf.Tensor, units: int, ctx: ModelContext, name: str) -> tf.Tensor:
    """x @ W + b with Glorot-uniform W (seeded by the graph seed): float32 [B, units]."""
    with tf.compat.v1.variable_scope(name):
        w = tf.compat.v1.get_variable(
            "kernel",
            shape=[int(x.shape[-1]), units],
            initializer=tf.compat.v1.glorot_uniform_initializer(),
            regularizer=_regularizer(ctx),
        )
        b = tf.compat.v1.get_variable("bias", shape=[units], initializer=tf.compat.v1.zeros_initializer())
    return tf.nn.bias_add(tf.matmul(x, w), b)  # BiasAdd (not +): on CPU it fuses with the matmul and a ReLU
