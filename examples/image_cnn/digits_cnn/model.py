"""A TPUEstimator model_fn of the kind users bring: a small CNN classifying 8x8 digit images.

It knows nothing of the pipeline: it takes `features["image"]` (float32 [B, 8, 8, 1], values 0-16), `labels`
(int64 [B]) and its hyperparameters from `params` (`filters`, `units`, `learning_rate`), and returns a
`TPUEstimatorSpec` with `eval_metrics=(metric_fn, tensors)` and a predictions dict. It trains and evaluates
unchanged in a plain `TPUEstimator(use_tpu=False)`.
"""

import tensorflow as tf

ModeKeys = tf.estimator.ModeKeys
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec
NUM_CLASSES = 10


def create_model(images, filters, units):
    """images float32 [B, 8, 8, 1] -> logits float32 [B, 10]."""
    init = tf.compat.v1.glorot_uniform_initializer
    x = images / 16.0
    x = tf.compat.v1.layers.conv2d(x, filters, 3, padding="same", activation=tf.nn.relu, kernel_initializer=init())
    x = tf.compat.v1.layers.max_pooling2d(x, 2, 2)
    x = tf.reshape(x, [-1, 4 * 4 * filters])
    x = tf.compat.v1.layers.dense(x, units, activation=tf.nn.relu, kernel_initializer=init())
    return tf.compat.v1.layers.dense(x, NUM_CLASSES, kernel_initializer=init())


def metric_fn(labels, logits):
    """Runs on the host: labels int32 [n], logits float32 [n, 10]."""
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {"accuracy": tf.compat.v1.metrics.accuracy(labels, predicted)}


def model_fn(features, labels, mode, params):
    if not isinstance(params["filters"], int) or not isinstance(params["units"], int):
        raise TypeError(f"filters and units must be ints, got {params['filters']!r} and {params['units']!r}")
    with tf.compat.v1.variable_scope("cnn"):
        logits = create_model(features["image"], params["filters"], params["units"])
    predictions = {
        "class_id": tf.argmax(logits, axis=-1, output_type=tf.int32),
        "probabilities": tf.nn.softmax(logits),
    }
    if mode == ModeKeys.PREDICT:
        return TPUEstimatorSpec(mode, predictions=predictions)
    labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    if mode == ModeKeys.EVAL:
        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    optimizer = tf.compat.v1.train.AdamOptimizer(params["learning_rate"])
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
