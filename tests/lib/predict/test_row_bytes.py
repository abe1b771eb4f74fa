"""A row's prediction bytes do not depend on the rows around it: predicted alone, in a 1,000-row file (one batch
per `session.run`) or in a 200,000-row file (several batches per run, `model_fn.predict_loop`), a row gets the
same output line, byte for byte, wherever in its batch it falls.

Marked `determinism`: `scripts/test.sh` runs these tests again with oneDNN off (`TF_ENABLE_ONEDNN_OPTS=0`), so
a difference between kernel settings shows on any machine (docs/predict_export.md, "Determinism").
"""

from __future__ import annotations

import json
import os
from typing import Dict, List

import pytest
import synthetic
import tensorflow as tf

from estimator_lib import estimator
from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig
from estimator_lib.data import records
from estimator_lib.model import inputs
from estimator_lib.predict import batch_predict, shard_name

B = 64  # predict batch size
LARGE = 200_000
# Where the rows under test stand in each file: several positions within a batch, the first and last rows.
IN_1000 = (0, 1, 333, 998, 999)
IN_LARGE = (5, 70_001, 131_111, 150_017, LARGE - 1)


@pytest.fixture(scope="module", params=["multiclass", "regression"])
def model(request, tmp_path_factory):
    """A small DNN (matrix products, ReLU, the head's softmax or the regression's de-standardisation)."""
    root = str(tmp_path_factory.mktemp(f"rows-{request.param}"))
    schema = synthetic.make_schema(request.param)
    train, _ = synthetic.write_dataset(os.path.join(root, "train"), synthetic.make_rows(256, 3, request.param), schema)
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=20),
        training=TrainingConfig(train_batch_size=32, predict_batch_size=B, train_steps=40, save_checkpoints_steps=40),
        model=ModelConfig(family="dnn", hidden_units=(32, 16), embedding_dim=4),
    )
    estimator.train(job, schema, train, os.path.join(root, "model"))
    return job, schema, os.path.join(root, "model"), request.param


def predicted_lines(model, directory: str, examples: List[bytes]) -> List[Dict]:
    """The output line of each input record, in input order, without the key and the row's origin (its file and
    record index, checked here: they are its place in this file)."""
    job, schema, model_dir, _ = model
    os.makedirs(directory)
    with tf.io.TFRecordWriter(os.path.join(directory, "part-00000.tfrecord")) as writer:
        for example in examples:
            writer.write(example)
    out = directory + "-out"
    batch_predict(job, schema, model_dir, os.path.join(directory, "*.tfrecord"), out, num_examples=len(examples))
    with open(os.path.join(out, shard_name(0, 1)), "rb") as f:
        lines = f.read().splitlines()
    path = os.path.join(directory, "part-00000.tfrecord")
    assert [(row["file"], row["record"]) for row in map(json.loads, lines)] == [(path, i) for i in range(len(lines))]
    return [line.split(b", ", 3)[3] for line in lines]  # after "{"key": ..., "file": ..., "record": ...,


@pytest.mark.determinism
def test_a_row_predicts_the_same_bytes_alone_in_1000_rows_and_in_200000_rows(model, tmp_path):
    job, schema, _, task = model
    assert inputs.predict_batches_per_run(B, 1000) == 1 and inputs.predict_batches_per_run(B, LARGE) > 1
    tested = synthetic.make_rows(len(IN_LARGE), seed=99, task=task)
    tested[0]["x-2"] = None  # one with a missing value (imputed in the graph)
    encode = lambda row, i: records.encode_example(row, schema, key=f"r{i}").SerializeToString()  # noqa: E731
    filler = [encode(row, i) for i, row in enumerate(synthetic.make_rows(1000, seed=7, task=task))]

    def file_of(size: int, positions) -> List[bytes]:
        examples = (filler * (size // len(filler) + 1))[:size]
        for row, position in zip(tested, positions):
            examples[position] = encode(row, position)
        return examples

    alone = [predicted_lines(model, str(tmp_path / f"alone-{i}"), [encode(row, 0)])[0] for i, row in enumerate(tested)]
    in_1000 = predicted_lines(model, str(tmp_path / "in-1000"), file_of(1000, IN_1000))
    in_large = predicted_lines(model, str(tmp_path / "in-large"), file_of(LARGE, IN_LARGE))

    assert [in_1000[p] for p in IN_1000] == alone
    assert [in_large[p] for p in IN_LARGE] == alone
    assert len(set(alone)) == len(alone) and all(json.loads(b"{" + line) for line in alone)
