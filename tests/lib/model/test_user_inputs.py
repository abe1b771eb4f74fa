"""`estimator_lib.model.user.inputs`: a user's training batches are the seeded record stream parsed by their
spec (`model.inputs.training_records`), with static shapes, resumed at the checkpoint's step; training on them
is bitwise repeatable and a resumed run ends on the variables of an uninterrupted one."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.engine.user import UserModel, train
from estimator_lib.model import inputs
from estimator_lib.model.user import inputs as user_inputs
from estimator_lib.model.user import records

SPEC = FeatureSpec.from_json(
    {
        "tokens": {"dtype": "int32", "shape": [4], "var_len": True, "default": 7},
        "pixels": {"dtype": "bytes", "shape": [2, 3, 1], "decode": "image"},
        "x": {"dtype": "float32", "shape": [2]},
        "id": {"dtype": "bytes", "shape": []},
        "label": {"dtype": "int64", "shape": []},
    },
    label="label",
    key="id",
)
FILE_SIZES = (11, 7, 14)  # 32 records: 8 batches of 4 per epoch
SEED, BUFFER, BATCH = 5, 9, 4
# A linear model over every feature: small enough to train in a test, and its variables see every row.
MODEL_FN = """
import tensorflow as tf


def model_fn(features, labels, mode, params):
    pixels = tf.reshape(features["pixels"], [-1, 6]) / 255.0
    x = tf.concat([pixels, features["x"], tf.cast(features["tokens"], tf.float32) / 10.0], axis=1)
    logits = tf.compat.v1.layers.dense(x, 3)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    optimizer = tf.compat.v1.train.AdamOptimizer(params["learning_rate"])
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
"""


def example(i: int) -> bytes:
    image = (np.arange(6, dtype=np.uint8).reshape(2, 3, 1) * (i % 7)).astype(np.uint8)
    feature = {
        "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=list(range(i % 4 + 1)))),
        "pixels": tf.train.Feature(bytes_list=tf.train.BytesList(value=[tf.io.encode_png(image).numpy()])),
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i / 3.0, -i])),
        "id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"row-%d" % i])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.fixture
def files(tmp_path):
    paths, first = [], 0
    for n, size in enumerate(FILE_SIZES):
        paths.append(str(tmp_path / f"part-{n}.tfrecord"))
        with tf.io.TFRecordWriter(paths[-1]) as writer:
            for i in range(first, first + size):
                writer.write(example(i))
        first += size
    return paths


def checkpoint_at(model_dir: str, step: int) -> None:
    """A checkpoint whose global step is `step`: where a resumed train() call starts."""
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.Session() as session:
            session.run(global_step.assign(step))
            tf.compat.v1.train.Saver().save(session, os.path.join(model_dir, "model.ckpt"), global_step=step)


@pytest.mark.parametrize("step", [0, 3, 10])
def test_the_train_batches_are_the_parsed_record_stream_from_the_checkpoints_step(files, tmp_path, step):
    """The cached, gathered batches equal parsing `training_records` from step x batch on, across epochs."""
    model_dir = str(tmp_path / "model")
    if step:
        checkpoint_at(model_dir, step)
    input_fn = user_inputs.train_input_fn_builder(files, SPEC, SEED, BUFFER, model_dir)
    dataset = input_fn({"batch_size": BATCH})
    features, label = dataset.element_spec
    shapes = {name: spec.shape.as_list() for name, spec in features.items()}
    assert shapes == {"tokens": [4, 4], "pixels": [4, 2, 3, 1], "x": [4, 2]} and label.shape.as_list() == [4]

    stream = inputs.training_records(files, SEED, BUFFER, step * BATCH).batch(BATCH, drop_remainder=True)
    expected = stream.map(lambda s: records.parse_batch(s, SPEC, with_label=True))
    for (want, want_label), (got, got_label) in zip(expected.take(20), dataset.take(20)):  # 80 rows: 2.5 epochs
        assert got_label.numpy().tolist() == want_label.numpy().tolist()
        for name in want:
            assert got[name].numpy().tobytes() == want[name].numpy().tobytes(), name


def variables(model_dir: str) -> dict:
    checkpoint = tf.train.latest_checkpoint(model_dir)
    return {name: tf.train.load_variable(checkpoint, name) for name, _ in tf.train.list_variables(checkpoint)}


def test_training_is_bitwise_repeatable_and_a_resumed_run_ends_on_the_uninterrupted_runs_variables(files, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "linear.py").write_text(MODEL_FN)
    user = UserModel("linear:model_fn", SPEC, {"learning_rate": 0.05}, str(code))
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=5),
        training=TrainingConfig(
            train_batch_size=BATCH, train_steps=20, save_checkpoints_steps=5, seed=SEED, shuffle_buffer_size=BUFFER
        ),
    )
    assert job.training.deterministic  # the default
    halfway = dataclasses.replace(job, training=dataclasses.replace(job.training, train_steps=10))
    first, second, resumed = (str(tmp_path / name) for name in ("first", "second", "resumed"))
    assert train(job, user, files, first, num_train_examples=sum(FILE_SIZES)) == 20
    assert train(job, user, files, second) == 20
    assert train(halfway, user, files, resumed) == 10
    assert train(job, user, files, resumed) == 20

    want = variables(first)
    assert want["global_step"] == 20 and "dense/kernel" in want
    for other in (second, resumed):
        got = variables(other)
        assert sorted(got) == sorted(want)
        for name, value in want.items():
            assert np.asarray(got[name]).tobytes() == np.asarray(value).tobytes(), (other, name)


KEPT = FeatureSpec.from_json(
    {
        "features": {
            "ids": {"dtype": "int32", "shape": [3]},
            "label_ids": {"dtype": "int32", "shape": []},
            "id": {"dtype": "bytes", "shape": []},
        },
        "label_in_features": True,
    },
    label="label_ids",
    key="id",
    source="kept.json",
)


def batches(*element):
    return tf.data.Dataset.from_tensors(element if len(element) > 1 else element[0])


@pytest.mark.parametrize(
    "dataset, found",
    [
        (batches({"ids": tf.zeros([4, 3], tf.int32), "label_ids": tf.zeros([4], tf.int32)}), None),
        (
            batches({"ids": tf.zeros([4, 3], tf.int32)}, tf.zeros([4], tf.int32)),
            ": the features: a dict of ['ids'], the spec gives a dict of ['ids', 'label_ids']",
        ),
        (
            batches({"ids": tf.zeros([4, 3], tf.int32), "label_ids": tf.zeros([4], tf.int32)}, tf.zeros([4])),
            ": it yields labels (float32 [batch]), but label_in_features keeps it in the features: yield only the "
            "features",
        ),
        (
            batches({"ids": tf.zeros([4, 3], tf.int64), "label_ids": tf.zeros([4], tf.int32)}),
            ": feature 'ids': int64 [batch, 3], the spec gives int32 [batch, 3]",
        ),
        (
            tf.data.Dataset.from_tensors({"ids": tf.zeros([4, 3], tf.int32), "label_ids": tf.zeros([4], tf.int32)})
            .unbatch()
            .map(lambda f: {**f, "ids": tf.boolean_mask(f["ids"], f["ids"] >= 0)})
            .batch(2),
            ": feature 'ids': int32 [batch, None], the spec gives int32 [batch, 3]",
        ),
        (tf.zeros([4, 3]), " returned EagerTensor, not a tf.data.Dataset"),
    ],
)
def test_a_user_input_is_checked_against_what_the_spec_gives_the_model(dataset, found):
    if found is None:
        user_inputs.check_user_input(dataset, KEPT, "m:input_fn")
        return
    with pytest.raises(user_inputs.UserCodeError) as e:
        user_inputs.check_user_input(dataset, KEPT, "m:input_fn")
    assert str(e.value).startswith(f"--input-fn m:input_fn{found}")


def test_a_user_input_fn_is_called_as_tpu_estimator_calls_it():
    calls = []

    def with_config(params, config):
        calls.append((params, config))
        return batches({"ids": tf.zeros([params["batch_size"], 3], tf.int32), "label_ids": tf.zeros([2], tf.int32)})

    input_fn = user_inputs.user_input_fn(with_config, "m:with_config", KEPT, {"units": 3, "batch_size": 99})
    input_fn({"batch_size": 2}, config="the run config", mode="train")
    assert calls == [({"units": 3, "batch_size": 2}, "the run config")]  # TPUEstimator's batch size wins
    with pytest.raises(user_inputs.UserCodeError, match=r"^--input-fn m:f: the function must take a `params`"):
        user_inputs.user_input_fn(lambda batch_size: None, "m:f", KEPT, {})
