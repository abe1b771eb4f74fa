"""A user's own model family, loaded through ModelConfig.family="plugin_model:tiny_logits".

It also records the static shape and dtype of every feature tensor the model receives, per mode, so tests
can check what the TPU computation would see.
"""

import tensorflow as tf

SEEN = []  # (mode, feature key, shape as list, dtype name)


def tiny_logits(features, ctx):
    for key, tensor in sorted(features.items()):
        SEEN.append((ctx.mode, key, tensor.shape.as_list(), tensor.dtype.name))
    numerics = tf.stack([features[f.key] for f in ctx.schema.numeric], axis=1)
    w = tf.compat.v1.get_variable("plugin_w", [numerics.shape[1], ctx.num_logits])
    b = tf.compat.v1.get_variable("plugin_b", [ctx.num_logits], initializer=tf.compat.v1.zeros_initializer())
    return tf.matmul(numerics, w) + b
