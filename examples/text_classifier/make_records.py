"""Writes generated token sequences in BERT's classifier record layout (`input_ids`, `input_mask`,
`segment_ids`, `label_ids`, padded to max_seq_length) with the feature spec that describes them:

    python examples/text_classifier/make_records.py OUT_DIR

A sequence is 4 to 32 tokens of a 50-token vocabulary after a [CLS] token (1); its label is 1 when it holds
token 5 more often than token 6. OUT_DIR/train.tfrecord (2,000), eval.tfrecord (301), predict.tfrecord (the eval
sequences without labels) and feature_spec.json.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

MAX_SEQ_LENGTH, VOCAB_SIZE, CLS = 32, 50, 1
SPEC = {
    "input_ids": {"dtype": "int32", "shape": [MAX_SEQ_LENGTH]},
    "input_mask": {"dtype": "int32", "shape": [MAX_SEQ_LENGTH]},
    "segment_ids": {"dtype": "int32", "shape": [MAX_SEQ_LENGTH]},
    "label_ids": {"dtype": "int32", "shape": []},
}


def sequences(n: int, seed: int):
    rng = np.random.RandomState(seed)
    for _ in range(n):
        length = rng.randint(4, MAX_SEQ_LENGTH)
        tokens = [CLS] + rng.randint(2, VOCAB_SIZE, size=length - 1).tolist()
        yield tokens, int(tokens.count(5) > tokens.count(6))


def example(tokens, label=None) -> bytes:
    pad = MAX_SEQ_LENGTH - len(tokens)
    ints = lambda values: tf.train.Feature(int64_list=tf.train.Int64List(value=values))  # noqa: E731
    feature = {
        "input_ids": ints(tokens + [0] * pad),
        "input_mask": ints([1] * len(tokens) + [0] * pad),
        "segment_ids": ints([0] * MAX_SEQ_LENGTH),
    }
    if label is not None:
        feature["label_ids"] = ints([label])
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write(path: str, records) -> None:
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    evaluation = list(sequences(301, seed=2))
    write(os.path.join(out_dir, "train.tfrecord"), (example(t, y) for t, y in sequences(2000, seed=1)))
    write(os.path.join(out_dir, "eval.tfrecord"), (example(t, y) for t, y in evaluation))
    write(os.path.join(out_dir, "predict.tfrecord"), (example(t) for t, _ in evaluation))
    with open(os.path.join(out_dir, "feature_spec.json"), "w") as f:
        json.dump(SPEC, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1])
