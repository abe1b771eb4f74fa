"""The BERT classifier layout through `estimator_lib.model.user` with TPU-strict mode on
(tests/tpu_patterns/bert_label_pattern): the label stays in the features (`label_in_features`), so the model_fn
reads `features["label_ids"]` with `labels` None; its metric_fn weights rows by `is_real_example`, and an eval set
holding BERT's own fake rows (is_real_example 0) besides the library's padding gives NumPy's metrics on the real
rows; records without a label are predicted and served; the export records the spec's option."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tpu_patterns import bert_label_pattern as pattern

from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.engine.user import UserModel, evaluate, export, predict, train
from estimator_lib.export.saved_model import run_cpu_graph
from estimator_lib.predict import read_predictions

HPARAMS = {"hidden_size": 16, "learning_rate": 0.05}
EVAL_ROWS, FAKE_ROWS = 77, 3  # 80 records: 2 batches of 32 and 16 rows, padded
JOB = JobConfig(
    tpu=TPUSettings(iterations_per_loop=50, num_cores=8, strict=True),
    training=TrainingConfig(train_batch_size=32, eval_batch_size=32, predict_batch_size=32, train_steps=120),
)


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("bert"))
    paths = {name: os.path.join(root, f"{name}.tfrecord") for name in ("train", "eval", "unlabelled")}
    pattern.write_records(paths["train"], 384, seed=1)
    labels = pattern.write_records(paths["eval"], EVAL_ROWS, seed=2, fake=FAKE_ROWS)
    pattern.write_records(paths["unlabelled"], EVAL_ROWS, seed=2, with_label=False)  # the eval inputs, no label
    spec = FeatureSpec.from_json(pattern.SPEC, label=pattern.LABEL, source="bert_spec.json")
    user = UserModel("tpu_patterns.bert_label_pattern:model_fn", spec, HPARAMS)
    model_dir = os.path.join(root, "model")
    assert train(JOB, user, paths["train"], model_dir) == 120
    return paths, labels, user, model_dir


def test_metrics_weighted_by_is_real_example_are_numpys_on_the_real_rows(bert, tmp_path):
    paths, labels, user, model_dir = bert
    result = evaluate(JOB, user, paths["eval"], model_dir)
    assert (result.num_examples, result.steps) == (EVAL_ROWS + FAKE_ROWS, 3)
    assert sorted(result.metrics) == ["eval_accuracy", "eval_loss"]
    predict(JOB, user, paths["eval"], model_dir, str(tmp_path / "out"))
    probabilities = np.array([r["probabilities"] for r in read_predictions(str(tmp_path / "out"))], np.float32)
    real = probabilities[:EVAL_ROWS]
    accuracy = np.mean(real.argmax(axis=1) == labels)
    assert result.metrics["eval_accuracy"] == pytest.approx(accuracy, abs=1e-6) and accuracy > 0.9
    loss = np.mean(-np.log(real[np.arange(EVAL_ROWS), labels].astype(np.float64)))
    assert result.metrics["eval_loss"] == pytest.approx(loss, rel=1e-4)


def test_records_without_the_label_are_predicted_and_served(bert, tmp_path):
    paths, _, user, model_dir = bert
    for name in ("eval", "unlabelled"):
        predict(JOB, user, paths[name], model_dir, str(tmp_path / name))
    labelled, unlabelled = (read_predictions(str(tmp_path / name)) for name in ("eval", "unlabelled"))
    assert len(unlabelled) == EVAL_ROWS
    assert [r["probabilities"] for r in unlabelled] == [r["probabilities"] for r in labelled[:EVAL_ROWS]]

    result = export(JOB, user, model_dir, str(tmp_path / "exports"), verify_files=paths["eval"])
    assert result["tag_sets"] == [["serve"], ["serve", "tpu"]] and result["rows_checked"] == 16
    with open(os.path.join(result["export_dir"], "assets.extra", "export_metadata.json")) as f:
        metadata = json.load(f)
    assert metadata["feature_spec"] == pattern.SPEC and metadata["label"] == pattern.LABEL
    examples = list(tf.data.TFRecordDataset(paths["unlabelled"]).take(5).as_numpy_iterator())
    served = run_cpu_graph(result["export_dir"], "serving_default", {"examples": np.array(examples, dtype=object)})
    expected = np.array([r["probabilities"] for r in unlabelled[:5]], np.float32)
    np.testing.assert_allclose(served["probabilities"], expected, rtol=1e-5, atol=1e-6)
