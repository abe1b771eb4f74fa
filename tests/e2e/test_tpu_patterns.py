"""End to end: model_fns with the patterns of the canonical public TPUEstimator models (tests/tpu_patterns/,
written here) through `tpu-pipeline run-local` with TPU-strict mode on, as a user runs them (`--code`,
`--model-fn`, a feature spec, their records):

- ResNet's: NHWC convolutions with fused batch norm, a step-wise learning rate read from the global step, a plain
  `EstimatorSpec` in PREDICT, an int64 label: no blocking finding (two notes), released, and predicted;
- MNIST's: raw uint8 image bytes handed to the model_fn as the tensor itself, an int64 label, the user's own
  training input_fn, settings read from absl flags set by `--hparams`;
- BERT's: gradients from `tf.gradients` through `CrossShardOptimizer.apply_gradients` (one `differs` finding,
  then accepted by name in a second run), the label read from the features, its global-step race ordered;
- a model_fn whose own code raises KeyError: the run names the key, the file and the line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import repo
import tensorflow as tf
from tpu_patterns import bert_pattern, mnist_pattern

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
CODE = os.path.join(repo.ROOT, "tests", "tpu_patterns")
SMALL = ["--set", "training.train_batch_size=16", "--set", "training.eval_batch_size=16"]
SMALL += ["--set", "training.predict_batch_size=16", "--set", "training.train_steps=40"]


def run_local(output: str, *args: str, exit_code: int = 0) -> tuple[dict, str]:
    """`tpu-pipeline run-local`, which must exit with `exit_code`: (the run's summary, its console output)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [TPU_PIPELINE, "run-local", "--output", output, "--code", CODE, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == exit_code, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        return json.load(f), proc.stdout


def write_spec(path: str, spec: dict) -> str:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    return path


def strict_names(summary: dict) -> list:
    return [(f["name"], f["severity"], f["accepted_by"]) for f in summary["strict"]["findings"]]


def write_images(path: str, count: int, seed: int) -> np.ndarray:
    """`count` records of a float32 [8, 8, 1] image and an int64 label: 1 when the image's mean is positive."""
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(count, 8, 8, 1)).astype(np.float32)
    labels = (images.mean(axis=(1, 2, 3)) > 0).astype(np.int64)
    with tf.io.TFRecordWriter(path) as writer:
        for image, label in zip(images, labels):
            feature = {
                "image": tf.train.Feature(float_list=tf.train.FloatList(value=image.ravel())),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return labels


def test_the_resnet_pattern_passes_strict_mode_and_is_released(tmp_path):
    write_images(str(tmp_path / "train.tfrecord"), 200, seed=1)
    eval_labels = write_images(str(tmp_path / "eval.tfrecord"), 37, seed=2)
    spec = {"image": {"dtype": "float32", "shape": [8, 8, 1]}, "label": {"dtype": "int64", "shape": []}}
    args = ["--model-fn", "strict_models:resnet_like_model_fn", "--label", "label", *SMALL]
    args += ["--feature-spec", write_spec(str(tmp_path / "spec.json"), spec), "--predict-data", "eval"]
    args += ["--data", str(tmp_path / "train.tfrecord"), "--eval-data", str(tmp_path / "eval.tfrecord")]
    args += ["--set", "blessing.comparison_metric=mean_loss", "--set", 'blessing.directions={"mean_loss": "lower"}']
    summary, console = run_local(str(tmp_path / "out"), *args)

    assert summary["status"] == "ok" and summary["export"]["published"], summary["export"]["reason"]
    assert strict_names(summary) == [("dtype:label", "note", None)] * 2  # train and eval read the int64 label
    assert summary["strict"]["counts"] == {"fails": 0, "accepted": 0, "differs": 0, "notes": 2}
    assert "  TPU-strict: 26 checks, 2 notes (dtype:label); details in " in console
    with open(summary["strict"]["uri"], encoding="utf-8") as f:
        assert json.load(f)["findings"][0]["message"].startswith("train input: the label is int64")
    rows = [json.loads(line) for shard in summary["predictions"]["shards"] for line in open(shard, encoding="utf-8")]
    assert [r["index"] for r in rows] == list(range(len(eval_labels)))  # EstimatorSpec predictions, in order
    assert all(sorted(r) == ["classes", "file", "index", "probabilities", "record"] for r in rows)
    assert sorted(summary["export"]["tag_sets"]) == [["serve"], ["serve", "tpu"]]
    assert summary["importance"] is None  # off for a user's model unless asked for
    assert "family" not in summary["config"]["job_config"]["model"]


def test_the_mnist_pattern_trains_through_its_own_input_fn_on_raw_bytes(tmp_path):
    mnist_pattern.write_records(str(tmp_path / "train.tfrecord"), 300, seed=1)
    eval_labels = mnist_pattern.write_records(str(tmp_path / "eval.tfrecord"), 45, seed=2)
    small = SMALL[:-2] + ["--set", "training.train_steps=150"]  # a key is given once
    args = ["--model-fn", "mnist_pattern:model_fn", "--input-fn", "mnist_pattern:train_input_fn", *small]
    args += ["--feature-spec", write_spec(str(tmp_path / "spec.json"), mnist_pattern.SPEC), "--label", "label"]
    args += ["--data", str(tmp_path / "train.tfrecord"), "--eval-data", str(tmp_path / "eval.tfrecord")]
    args += ["--hparams", "mnist_hidden_units=32", "--set", "blessing.comparison_metric=accuracy"]
    args += ["--predict-data", "eval"]
    summary, _ = run_local(str(tmp_path / "out"), *args)

    assert summary["status"] == "ok" and summary["blessed"], summary["blessing"]
    assert summary["strict"]["counts"]["fails"] == 0 and summary["strict"]["counts"]["notes"] == 2
    rows = [json.loads(line) for shard in summary["predictions"]["shards"] for line in open(shard, encoding="utf-8")]
    accuracy = float(np.mean(np.array([r["class_ids"] for r in rows]) == eval_labels))
    assert summary["metrics"]["accuracy"] == pytest.approx(accuracy, abs=1e-6) and accuracy > 0.5
    reader = tf.train.load_checkpoint(summary["model"]["uri"])
    assert reader.get_variable_to_shape_map()["hidden/kernel"] == [64, 32]  # the absl flag the hparam set


def test_the_bert_pattern_reports_one_difference_then_accepts_it_by_name(tmp_path):
    bert_pattern.write_records(str(tmp_path / "train.tfrecord"), 256, seed=1)
    bert_pattern.write_records(str(tmp_path / "eval.tfrecord"), 45, seed=2)
    spec = {"features": bert_pattern.SPEC, "label_in_features": True}
    hparams = {k: v for k, v in bert_pattern.HPARAMS.items() if k != "num_train_steps"}
    args = ["--model-fn", "bert_pattern:model_fn", "--label", bert_pattern.LABEL, *SMALL]
    args += ["--feature-spec", write_spec(str(tmp_path / "spec.json"), spec)]
    args += ["--hparams-file", write_spec(str(tmp_path / "hparams.json"), {**hparams, "num_train_steps": 40})]
    args += ["--data", str(tmp_path / "train.tfrecord"), "--eval-data", str(tmp_path / "eval.tfrecord")]
    args += ["--set", "blessing.comparison_metric=eval_loss"]
    args += ["--set", 'blessing.directions={"eval_loss": "lower", "eval_accuracy": "higher"}']
    first, console = run_local(str(tmp_path / "a"), *args)

    assert first["status"] == "ok", first.get("error")
    [(name, severity, accepted)] = strict_names(first)
    assert name.startswith("cross-shard:") and (severity, accepted) == ("differs", None)
    assert f"TPU-strict: 26 checks, 1 differs ({name})" in console
    assert set(first["metrics"]) == {"eval_accuracy", "eval_loss"}

    second, console = run_local(str(tmp_path / "b"), *args, "--set", f"tpu.strict_accept={name}")
    assert strict_names(second) == [(name, "differs", name)]
    assert second["strict"]["counts"] == {"fails": 0, "accepted": 1, "differs": 0, "notes": 0}
    assert f"TPU-strict: 26 checks, 1 accepted ({name})" in console
    assert second["config"]["job_config"]["tpu"]["strict_accept"] == [name]
    # The step's global-step race is ordered: one seed, the same checkpoint.
    assert second["fingerprints"]["model"] == first["fingerprints"]["model"]


def test_an_error_of_the_model_fns_own_code_is_named_with_its_file_and_line(tmp_path):
    bert_pattern.write_records(str(tmp_path / "train.tfrecord"), 64, seed=1)
    spec = {name: entry for name, entry in bert_pattern.SPEC.items()}
    args = ["--model-fn", "strict_models:missing_key_model_fn", "--label", bert_pattern.LABEL, *SMALL]
    args += ["--feature-spec", write_spec(str(tmp_path / "spec.json"), spec)]
    args += ["--data", str(tmp_path / "train.tfrecord"), "--set", "blessing.comparison_metric=log_loss"]
    summary, _ = run_local(str(tmp_path / "out"), *args, exit_code=1)

    assert summary["status"] == "failed" and summary["stage"] == "train"
    with open(os.path.join(CODE, "strict_models.py"), encoding="utf-8") as f:
        line = next(i for i, text in enumerate(f, 1) if "# the line the error names" in text)
    assert summary["error"].startswith(
        f"ModelBuildError: model_fn strict_models:missing_key_model_fn raised KeyError: 'label_ids' at "
        f"strict_models.py:{line} (in missing_key_model_fn) while building the train graph"
    ), summary["error"]
