"""A user's model_fn batch-predicted on Apache Beam (DirectRunner): the shards and the manifest byte for byte the
in-process output's, for the example CNN (gzip records; three files whose batches span their ends, several
shards; a key), the BERT-style Transformer and a model trained through its own input_fn, and (slow) on real worker
processes of both local runners; a wrong record count publishes nothing."""

from __future__ import annotations

import dataclasses
import os

import pytest
import tensorflow as tf
from file_trees import tree
from tpu_patterns import mnist_pattern
from user_examples import trained_example

pytest.importorskip("apache_beam")

from estimator_lib import storage  # noqa: E402
from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig  # noqa: E402
from estimator_lib.config.beam import BeamConfig  # noqa: E402
from estimator_lib.config.feature_spec import FeatureSpec  # noqa: E402
from estimator_lib.engine.user import UserModel, predict, train  # noqa: E402
from estimator_lib.engine.user import beam as user_beam  # noqa: E402
from estimator_lib.predict import PredictionError, read_predictions, verify_output  # noqa: E402

B = 32
MNIST_INPUT_FN = "tpu_patterns.mnist_pattern:train_input_fn"
JOB = JobConfig(
    tpu=TPUSettings(iterations_per_loop=20),
    training=TrainingConfig(train_batch_size=32, eval_batch_size=B, predict_batch_size=B, train_steps=20),
)


def split_records(path: str, out_dir: str, sizes) -> str:
    """`path`'s records cut into files of `sizes` records (the rest in the last), uncompressed; their glob."""
    records = list(tf.data.TFRecordDataset(path, compression_type="").as_numpy_iterator())
    os.makedirs(out_dir)
    starts = [0, *[sum(sizes[: i + 1]) for i in range(len(sizes))], len(records)]
    for i, (start, end) in enumerate(zip(starts, starts[1:])):
        with tf.io.TFRecordWriter(os.path.join(out_dir, f"part-{i}.tfrecord")) as writer:
            for record in records[start:end]:
                writer.write(record)
    return os.path.join(out_dir, "*.tfrecord")


def same_bytes(user: UserModel, model_dir: str, data: str, out: str, **kwargs) -> list:
    """Predicts `data` in-process and on Beam; asserts the outputs are the same files, byte for byte."""
    here = predict(JOB, user, data, model_dir, os.path.join(out, "inprocess"), **kwargs)
    there = user_beam.predict(JOB, user, data, model_dir, os.path.join(out, "beam"), **kwargs)
    assert tree(os.path.join(out, "beam")) == tree(os.path.join(out, "inprocess"))  # shards, manifest, marker
    assert there.manifest == here.manifest and there.count == here.count > 0
    verify_output(os.path.join(out, "beam"))
    return read_predictions(os.path.join(out, "beam"))


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    hparams = {"filters": 4, "units": 16, "learning_rate": 0.01}
    root = str(tmp_path_factory.mktemp("digits"))
    return trained_example("image_cnn", "digits_cnn.model:model_fn", "label", hparams, JOB, root)


@pytest.mark.determinism
def test_the_cnn_on_gzip_records_gives_the_in_process_bytes(digits, tmp_path):
    rows = same_bytes(digits.user, digits.model_dir, digits.records("predict.tfrecord.gz"), str(tmp_path))
    assert [r["index"] for r in rows] == list(range(297)) and list(rows[0])[-2:] == ["class_id", "probabilities"]


@pytest.mark.determinism
def test_batches_that_span_file_ends_and_shards_give_the_in_process_bytes_with_keys(digits, tmp_path):
    data = split_records(digits.records("eval.tfrecord"), str(tmp_path / "parts"), [50, 7])  # 50 + 7 + 240 rows
    spec = FeatureSpec.read(digits.records("feature_spec.json"), key="label")  # the label names each row here
    user = dataclasses.replace(digits.user, spec=spec)
    rows = same_bytes(user, digits.model_dir, data, str(tmp_path / "out"), num_shards=3, num_examples=297)
    assert [(os.path.basename(r["file"]), r["record"]) for r in rows[48:52]] == [
        ("part-0.tfrecord", 48),
        ("part-0.tfrecord", 49),
        ("part-1.tfrecord", 0),
        ("part-1.tfrecord", 1),
    ]
    assert all(type(r["key"]) is int for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize(
    "config", [BeamConfig(direct_num_workers=2), BeamConfig(runner="DaskRunner", dask_num_workers=2)], ids=str
)
def test_worker_processes_import_the_model_and_give_the_in_process_bytes(digits, tmp_path, config):
    data = split_records(digits.records("eval.tfrecord"), str(tmp_path / "parts"), [100, 100])
    here, there = str(tmp_path / "inprocess"), str(tmp_path / "beam")
    predict(JOB, digits.user, data, digits.model_dir, here, num_shards=2)
    user_beam.predict(JOB, digits.user, data, digits.model_dir, there, num_shards=2, beam_config=config)
    assert tree(there) == tree(here)


def test_a_wrong_record_count_publishes_nothing(digits, tmp_path):
    out = str(tmp_path / "beam")
    with pytest.raises(PredictionError, match="num_examples=300 but the inputs hold 297 records"):
        user_beam.predict(JOB, digits.user, digits.records("eval.tfrecord"), digits.model_dir, out, num_examples=300)
    assert not storage.exists(out)


def test_a_record_the_spec_does_not_describe_fails_its_worker_naming_the_file_record_and_feature(digits, tmp_path):
    records = list(tf.data.TFRecordDataset(digits.records("eval.tfrecord")).as_numpy_iterator())[:60]
    wrong = tf.train.Example()
    wrong.features.feature["image"].int64_list.value.extend([1] * 64)  # the spec says 64 floats
    wrong.features.feature["label"].int64_list.value.append(3)
    path = str(tmp_path / "part-0.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i, record in enumerate(records):
            writer.write(wrong.SerializeToString() if i == 40 else record)  # the launcher checks record 0 only
    out = str(tmp_path / "beam")
    with pytest.raises(Exception, match=r"part-0\.tfrecord: record 40: .*image"):
        user_beam.predict(JOB, digits.user, path, digits.model_dir, out)
    assert not storage.exists(out)


@pytest.mark.determinism
def test_the_text_transformer_gives_the_in_process_bytes(tmp_path_factory, tmp_path):
    hparams = {
        "vocab_size": 50,
        "hidden_size": 16,
        "num_heads": 2,
        "max_seq_length": 32,
        "num_labels": 2,
        "learning_rate": 0.003,
    }
    root = str(tmp_path_factory.mktemp("text"))
    text = trained_example("text_classifier", "token_transformer.model:model_fn", "label_ids", hparams, JOB, root)
    rows = same_bytes(text.user, text.model_dir, text.records("predict.tfrecord"), str(tmp_path), num_shards=2)
    assert len(rows) == 301 and all(len(r["probabilities"]) == 2 for r in rows)


@pytest.mark.determinism
def test_a_model_trained_through_its_own_input_fn_gives_the_in_process_bytes(tmp_path):
    """Its input_fn is for training only: prediction reads the records through the spec on both engines."""
    train_path, eval_path = str(tmp_path / "train.tfrecord"), str(tmp_path / "eval.tfrecord")
    mnist_pattern.write_records(train_path, 96, seed=1)
    mnist_pattern.write_records(eval_path, 75, seed=2)  # 2 batches and 11 rows: the last batch is padded
    spec = FeatureSpec.from_json(mnist_pattern.SPEC, label="label", source="mnist_spec.json")
    hparams = {"mnist_learning_rate": 0.02, "mnist_hidden_units": 8}
    user = UserModel("tpu_patterns.mnist_pattern:model_fn", spec, hparams, input_fn=MNIST_INPUT_FN)
    model_dir = str(tmp_path / "model")
    assert train(JOB, user, train_path, model_dir) == 20
    rows = same_bytes(user, model_dir, eval_path, str(tmp_path / "out"))
    assert [r["index"] for r in rows] == list(range(75))
