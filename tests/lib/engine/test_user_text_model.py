"""The BERT-style Transformer of examples/text_classifier through `estimator_lib.model.user` with TPU-strict
mode on: its `tf.debugging` asserts (string messages) and its model_fn without a `config` argument pass the
checks; its metric_fn's `eval_accuracy` and `eval_loss` equal NumPy's on the real rows of an eval set that is
not a multiple of the batch; predictions come back in order; the export is verified."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from user_examples import trained_example

from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
from estimator_lib.engine.user import evaluate, export, predict
from estimator_lib.predict import read_predictions

HPARAMS = {
    "vocab_size": 50,
    "hidden_size": 32,
    "num_heads": 4,
    "max_seq_length": 32,
    "num_labels": 2,
    "learning_rate": 0.003,
}


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=100, num_cores=8, strict=True),
        training=TrainingConfig(train_batch_size=64, eval_batch_size=64, predict_batch_size=64, train_steps=300),
    )
    root = str(tmp_path_factory.mktemp("text"))
    trained = trained_example("text_classifier", "token_transformer.model:model_fn", "label_ids", HPARAMS, job, root)
    return trained.root, trained.job, trained.user, trained.model_dir


def _labels(path):
    return np.array(
        [
            tf.train.Example.FromString(r).features.feature["label_ids"].int64_list.value[0]
            for r in tf.data.TFRecordDataset(path).as_numpy_iterator()
        ]
    )


def test_bert_style_metrics_equal_numpys_on_the_real_rows(text, tmp_path):
    root, job, user, model_dir = text
    result = evaluate(job, user, os.path.join(root, "eval.tfrecord"), model_dir)
    assert (result.num_examples, result.steps) == (301, 5) and sorted(result.metrics) == ["eval_accuracy", "eval_loss"]
    predict(job, user, os.path.join(root, "predict.tfrecord"), model_dir, str(tmp_path / "out"))
    rows = read_predictions(str(tmp_path / "out"))
    assert [r["index"] for r in rows] == list(range(301))
    probabilities = np.array([r["probabilities"] for r in rows], dtype=np.float32)
    labels = _labels(os.path.join(root, "eval.tfrecord"))
    accuracy = np.mean(probabilities.argmax(axis=1) == labels)
    assert result.metrics["eval_accuracy"] == pytest.approx(accuracy, abs=1e-6) and accuracy > 0.75
    loss = np.mean(-np.log(probabilities[np.arange(301), labels].astype(np.float64)))
    assert result.metrics["eval_loss"] == pytest.approx(loss, rel=1e-4)


def test_the_export_serves_both_signatures(text, tmp_path):
    root, job, user, model_dir = text
    result = export(job, user, model_dir, str(tmp_path / "exports"), verify_files=os.path.join(root, "eval.tfrecord"))
    assert result["tag_sets"] == [["serve"], ["serve", "tpu"]] and result["rows_checked"] == 16
