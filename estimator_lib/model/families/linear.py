"""Linear model: logits = normalised numerics @ W + sum of per-category weights + b."""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

from estimator_lib.model.families.layers import ModelContext, dense, embeddings, normalized_numerics


def linear_logits(features: Dict[str, tf.Tensor], ctx: ModelContext) -> tf.Tensor:
    """Returns float32 [B, ctx.num_logits]. A categorical's weight is an embedding of width num_logits."""
    with tf.compat.v1.variable_scope("linear"):
        terms = embeddings(features, ctx, dim=ctx.num_logits, scope="categorical_weights")
        numerics = normalized_numerics(features, ctx)
        if numerics is not None:
            terms.append(dense(numerics, ctx.num_logits, ctx, name="numeric"))
        else:
            bias = tf.compat.v1.get_variable("bias", [ctx.num_logits], initializer=tf.compat.v1.zeros_initializer())
            terms.append(tf.zeros_like(terms[0]) + bias)
        return tf.add_n(terms)
