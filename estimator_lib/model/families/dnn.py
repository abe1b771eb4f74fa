"""Feed-forward network over normalised numerics and categorical embeddings."""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

from estimator_lib.model.families.layers import ModelContext, dense, embeddings, normalized_numerics


def dnn_logits(features: Dict[str, tf.Tensor], ctx: ModelContext) -> tf.Tensor:
    """Returns float32 [B, ctx.num_logits]: ReLU layers of `ctx.model.hidden_units`, dropout in training."""
    with tf.compat.v1.variable_scope("dnn"):
        parts = embeddings(features, ctx, dim=ctx.model.embedding_dim, scope="embeddings")
        numerics = normalized_numerics(features, ctx)
        if numerics is not None:
            parts.append(numerics)
        x = tf.concat(parts, axis=1)
        for i, units in enumerate(ctx.model.hidden_units):
            x = tf.nn.relu(dense(x, units, ctx, name=f"hidden_{i}"))
            if ctx.training and ctx.model.dropout > 0:
                x = tf.compat.v1.nn.dropout(x, rate=ctx.model.dropout)
        return dense(x, ctx.num_logits, ctx, name="logits")
