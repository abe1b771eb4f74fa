"""A TPUEstimator model_fn in the style of google-research/bert's `run_classifier.py`, at toy size.

Features in BERT's record layout: `input_ids`, `input_mask`, `segment_ids` (int32 [B, max_seq_length]) and
`label_ids` (int32 [B]) as the label. One Transformer layer (token, position and segment embeddings, masked
multi-head self-attention, a feed-forward block, layer norms), the first token pooled, a softmax classifier.
Hyperparameters come from `params`: vocab_size, hidden_size, num_heads, max_seq_length, num_labels,
learning_rate. Like BERT's, it checks its ids with `tf.debugging` asserts, and its metric_fn reports
`eval_accuracy` and `eval_loss`.
"""

import tensorflow as tf

ModeKeys = tf.estimator.ModeKeys
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec


def _init():
    return tf.compat.v1.truncated_normal_initializer(stddev=0.02)


def layer_norm(x, name):
    """Normalises the last dimension (mean and variance by reduce_mean), with a learned scale and offset."""
    with tf.compat.v1.variable_scope(name):
        size = x.shape[-1]
        gamma = tf.compat.v1.get_variable("gamma", [size], initializer=tf.compat.v1.ones_initializer())
        beta = tf.compat.v1.get_variable("beta", [size], initializer=tf.compat.v1.zeros_initializer())
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        variance = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta


def dense(x, units, name, activation=None):
    return tf.compat.v1.layers.dense(x, units, activation=activation, kernel_initializer=_init(), name=name)


def attention(x, mask, num_heads, name):
    """Masked multi-head self-attention: x float32 [B, L, H], mask int32 [B, L] -> [B, L, H]."""
    batch, length, hidden = x.shape
    batch = tf.shape(x)[0] if batch is None else batch  # static on a TPU; unknown in the serving graph
    size = hidden // num_heads
    with tf.compat.v1.variable_scope(name):

        def heads(t):
            return tf.transpose(tf.reshape(t, [batch, length, num_heads, size]), [0, 2, 1, 3])

        q, k, v = (heads(dense(x, hidden, n)) for n in ("query", "key", "value"))
        scores = tf.matmul(q, k, transpose_b=True) / (size**0.5)
        scores += (1.0 - tf.cast(mask[:, None, None, :], tf.float32)) * -10000.0
        context = tf.matmul(tf.nn.softmax(scores), v)
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [batch, length, hidden])
        return dense(context, hidden, "output")


def create_model(input_ids, input_mask, segment_ids, params):
    """-> logits float32 [B, num_labels]."""
    hidden = params["hidden_size"]
    checks = [
        tf.debugging.assert_non_negative(input_ids, message="input_ids must be >= 0"),
        tf.debugging.assert_less(input_ids, params["vocab_size"], message="input_ids must be < vocab_size"),
    ]
    with tf.control_dependencies(checks):
        input_ids = tf.identity(input_ids)
    with tf.compat.v1.variable_scope("bert"):
        words = tf.compat.v1.get_variable("word_embeddings", [params["vocab_size"], hidden], initializer=_init())
        positions = tf.compat.v1.get_variable(
            "position_embeddings", [params["max_seq_length"], hidden], initializer=_init()
        )
        segments = tf.compat.v1.get_variable("token_type_embeddings", [2, hidden], initializer=_init())
        x = tf.gather(words, input_ids) + positions[None] + tf.gather(segments, segment_ids)
        x = layer_norm(x, "embeddings_norm")
        x = layer_norm(x + attention(x, input_mask, params["num_heads"], "attention"), "attention_norm")
        x = layer_norm(x + dense(dense(x, 4 * hidden, "intermediate", tf.nn.gelu), hidden, "ffn_output"), "output_norm")
        pooled = dense(x[:, 0], hidden, "pooler", tf.tanh)
    return dense(pooled, params["num_labels"], "classifier")


def metric_fn(per_example_loss, label_ids, logits):
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {
        "eval_accuracy": tf.compat.v1.metrics.accuracy(label_ids, predictions),
        "eval_loss": tf.compat.v1.metrics.mean(per_example_loss),
    }


def model_fn(features, labels, mode, params):
    logits = create_model(features["input_ids"], features["input_mask"], features["segment_ids"], params)
    probabilities = tf.nn.softmax(logits)
    if mode == ModeKeys.PREDICT:
        return TPUEstimatorSpec(mode, predictions={"probabilities": probabilities})
    label_ids = tf.reshape(labels, [-1])
    one_hot = tf.one_hot(label_ids, params["num_labels"])
    per_example_loss = -tf.reduce_sum(one_hot * tf.nn.log_softmax(logits), axis=-1)
    loss = tf.reduce_mean(per_example_loss)
    if mode == ModeKeys.EVAL:
        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [per_example_loss, label_ids, logits]))
    optimizer = tf.compat.v1.train.AdamOptimizer(params["learning_rate"])
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
