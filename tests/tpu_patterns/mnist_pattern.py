"""A model with the input contract of the tensorflow/tpu MNIST sample, written here for the tests (not its code):
records of raw uint8 image bytes (`image_raw`) and an int64 `label`; an input_fn that yields (image, label)
batches, the image tensor itself, with `drop_remainder`; a model_fn that takes that tensor (not a dict), casts
the uint8 pixels to float on the TPU, feeds the int64 labels uncast, and reads absl `FLAGS` for its settings;
its learning rate decays over `params['train_steps']` from the global step TPUEstimator creates.

Images are SIZE x SIZE (8 x 8 keeps the tests fast); each class is a fixed pattern of bright pixels plus noise.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import tensorflow as tf
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_float("mnist_learning_rate", 0.05, "the initial learning rate")
flags.DEFINE_integer("mnist_hidden_units", 16, "the hidden layer's width")

SIZE, CLASSES = 8, 10
IMAGE, LABEL = "image_raw", "label"
# The feature spec of the records: raw bytes decoded to uint8 [SIZE, SIZE], handed to the model_fn as the tensor.
SPEC = {
    "features": {
        IMAGE: {"dtype": "bytes", "shape": [SIZE, SIZE], "decode": "raw", "raw_dtype": "uint8"},
        LABEL: {"dtype": "int64", "shape": []},
    },
    "single_input": IMAGE,
}
ModeKeys = tf.estimator.ModeKeys
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec


def images(labels: np.ndarray, seed: int) -> np.ndarray:
    """uint8 [N, SIZE, SIZE]: class c lights pixels c*6 .. c*6+5 (row-major) brightly, with noise everywhere."""
    rng = np.random.default_rng(seed)
    out = rng.integers(0, 80, (len(labels), SIZE * SIZE))
    for row, label in enumerate(labels):
        out[row, label * 6 : label * 6 + 6] = rng.integers(180, 256, 6)
    return out.reshape(-1, SIZE, SIZE).astype(np.uint8)


def write_records(path: str, count: int, seed: int) -> np.ndarray:
    """`count` records of (image_raw: SIZE*SIZE raw bytes, label: int64) at `path`; returns their labels."""
    labels = np.random.default_rng(seed).integers(0, CLASSES, count)
    with tf.io.TFRecordWriter(path) as writer:
        for image, label in zip(images(labels, seed + 1), labels):
            feature = {
                IMAGE: tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
                LABEL: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return labels


def decode(serialized: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """One record -> (uint8 [SIZE, SIZE], int64 [])."""
    parsed = tf.io.parse_single_example(
        serialized, {IMAGE: tf.io.FixedLenFeature([], tf.string), LABEL: tf.io.FixedLenFeature([], tf.int64)}
    )
    image = tf.reshape(tf.io.decode_raw(parsed[IMAGE], tf.uint8), [SIZE, SIZE])
    return image, parsed[LABEL]


def train_input_fn(params: Dict) -> tf.data.Dataset:
    """(uint8 [B, SIZE, SIZE], int64 [B]) batches of `params['batch_size']` (per shard on a TPU), endless and
    shuffled, with static shapes; reads `params['train_files']`."""
    dataset = tf.data.TFRecordDataset(params["train_files"]).map(decode).cache().repeat()
    dataset = dataset.shuffle(256, seed=params.get("seed", 1))
    return dataset.batch(params["batch_size"], drop_remainder=True)


def create_model(image: tf.Tensor, hidden_units: int) -> tf.Tensor:
    """uint8 [B, SIZE, SIZE] -> logits float32 [B, CLASSES] (runs on the TPU)."""
    pixels = tf.reshape(tf.cast(image, tf.float32) / 255.0, [-1, SIZE * SIZE])
    hidden = tf.compat.v1.layers.dense(pixels, hidden_units, activation=tf.nn.relu, name="hidden")
    return tf.compat.v1.layers.dense(hidden, CLASSES, name="logits")


def metric_fn(labels: tf.Tensor, logits: tf.Tensor) -> Dict:
    """Runs on the host: accuracy of int64 [B] labels against float32 [B, CLASSES] logits."""
    return {"accuracy": tf.compat.v1.metrics.accuracy(labels, tf.argmax(logits, axis=1))}


def model_fn(features, labels, mode, params):
    """`features` is the uint8 image tensor [B, SIZE, SIZE] itself; `labels` int64 [B]."""
    logits = create_model(features, FLAGS.mnist_hidden_units)
    if mode == ModeKeys.PREDICT:
        predictions = {"class_ids": tf.argmax(logits, axis=1), "probabilities": tf.nn.softmax(logits)}
        return TPUEstimatorSpec(mode, predictions=predictions)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if mode == ModeKeys.EVAL:
        return TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    step = tf.compat.v1.train.get_global_step()
    rate = tf.compat.v1.train.exponential_decay(FLAGS.mnist_learning_rate, step, params["train_steps"], 0.5)
    optimizer = tf.compat.v1.train.AdamOptimizer(rate)
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    return TPUEstimatorSpec(mode, loss=loss, train_op=optimizer.minimize(loss, step))
