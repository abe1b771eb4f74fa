"""Writes scikit-learn's digits (1,797 8x8 images, shipped with the package) as TFRecords of tf.train.Example
with the feature spec that describes them:

    python examples/image_cnn/make_records.py OUT_DIR

OUT_DIR/train.tfrecord (1,500 records), eval.tfrecord (297: not a multiple of a batch), predict.tfrecord (the
eval images without labels, gzip-compressed) and feature_spec.json.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

SPEC = {"image": {"dtype": "float32", "shape": [8, 8, 1]}, "label": {"dtype": "int32", "shape": []}}
TRAIN_ROWS = 1500


def example(image: np.ndarray, label=None) -> bytes:
    feature = {"image": tf.train.Feature(float_list=tf.train.FloatList(value=image.astype(np.float32).ravel()))}
    if label is not None:
        feature["label"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write(path: str, records, compression: str = "") -> None:
    with tf.io.TFRecordWriter(path, options=compression or None) as writer:
        for record in records:
            writer.write(record)


def main(out_dir: str) -> None:
    digits = load_digits()
    order = np.random.RandomState(0).permutation(len(digits.target))
    images, labels = digits.images[order], digits.target[order]
    os.makedirs(out_dir, exist_ok=True)
    write(os.path.join(out_dir, "train.tfrecord"), map(example, images[:TRAIN_ROWS], labels[:TRAIN_ROWS]))
    write(os.path.join(out_dir, "eval.tfrecord"), map(example, images[TRAIN_ROWS:], labels[TRAIN_ROWS:]))
    write(os.path.join(out_dir, "predict.tfrecord.gz"), map(example, images[TRAIN_ROWS:]), "GZIP")
    with open(os.path.join(out_dir, "feature_spec.json"), "w") as f:
        json.dump(SPEC, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1])
