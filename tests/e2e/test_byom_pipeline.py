"""End to end: the two example user models of examples/ through `tpu-pipeline run-local` as docs/byom.md runs
them (records written by their `make_records.py`, their hyperparameters file), then a second run that warm-starts
from the first one's published model and is compared with it.

Each run: trained; evaluated with the user's metric_fn on an eval set that is not a multiple of the batch size
(the metric equals NumPy's on the real rows); blessed by a threshold on the user's metric; exported with both tag
sets and verified; batch-predicted (one row per input record, in order); released.
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

from estimator_lib import release

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
EXAMPLES = os.path.join(repo.ROOT, "examples")


def make_records(example: str, root: str) -> str:
    subprocess.run([sys.executable, os.path.join(EXAMPLES, example, "make_records.py"), root], check=True)
    return root


def run_local(output: str, *args: str, exit_code: int = 0) -> dict:
    """`tpu-pipeline run-local`, which must exit with `exit_code`: the run's summary."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [TPU_PIPELINE, "run-local", "--output", output, *args], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == exit_code, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def records(path: str) -> list:
    kind = "GZIP" if path.endswith(".gz") else ""
    return [tf.train.Example.FromString(r) for r in tf.data.TFRecordDataset(path, kind).as_numpy_iterator()]


def int_feature(path: str, name: str) -> np.ndarray:
    return np.array([e.features.feature[name].int64_list.value[0] for e in records(path)])


def prediction_rows(summary: dict) -> list:
    rows = []
    for shard in summary["predictions"]["shards"]:
        with open(shard, encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f)
    return rows


def user_args(example: str, model_fn: str, root: str, label: str) -> list:
    return [
        "--model-fn",
        model_fn,
        "--code",
        os.path.join(EXAMPLES, example),
        "--feature-spec",
        os.path.join(root, "feature_spec.json"),
        "--hparams-file",
        os.path.join(EXAMPLES, example, "hparams.json"),
        "--data",
        os.path.join(root, "train.tfrecord"),
        "--eval-data",
        os.path.join(root, "eval.tfrecord"),
        "--label",
        label,
    ]


def assert_released(summary: dict, tags=(["serve"], ["serve", "tpu"])) -> None:
    assert summary["status"] == "ok" and summary["blessed"], summary.get("error")
    assert sorted(summary["export"]["tag_sets"]) == sorted(tags)
    assert summary["export"]["published"], summary["export"]["reason"]
    published = release.latest(os.path.dirname(os.path.dirname(summary["export"]["published_uri"])))
    assert published is not None and published.version == summary["export"]["published_version"]


def test_the_image_cnn_runs_end_to_end_then_warm_starts_from_its_published_model(tmp_path):
    root = make_records("image_cnn", str(tmp_path / "records"))
    output = str(tmp_path / "out")
    args = user_args("image_cnn", "digits_cnn.model:model_fn", root, "label")
    args += ["--hparams", "units=24", "--predict-data", "eval", "--set", "training.train_steps=200"]
    args += ["--set", 'blessing.thresholds={"accuracy": 0.8}', "--set", "blessing.comparison_metric=accuracy"]
    first = run_local(output, *args, "--baseline", "none")

    assert_released(first)
    eval_labels = int_feature(os.path.join(root, "eval.tfrecord"), "label")
    assert len(eval_labels) % 64 != 0  # the eval batch: the last batch is padded
    rows = prediction_rows(first)
    assert [r["index"] for r in rows] == list(range(len(eval_labels)))
    numpy_accuracy = float(np.mean(np.array([r["class_id"] for r in rows]) == eval_labels))
    assert first["metrics"]["accuracy"] == pytest.approx(numpy_accuracy, abs=1e-6)
    assert first["blessing"]["reasons"] == [] and first["metrics"]["accuracy"] >= 0.8
    serving = first["serving"]  # the export served on the user's own signatures, as it predicted
    assert serving["rows_checked"] == 64 and serving["signatures"] == ["raw:serving_default", "serving_default"]
    assert all(sorted(diffs) == ["class_id", "probabilities"] for diffs in serving["max_abs_diff"].values())
    job = first["config"]["job_config"]["model"]
    assert job["hparams"] == {"filters": 8, "units": 24, "learning_rate": 0.01} and type(job["hparams"]["units"]) is int

    second = run_local(output, *args, "--warm-start", "latest", "--set", "blessing.min_improvement=-0.05")
    assert second["status"] == "ok"
    with open(second["manifests"]["train"], encoding="utf-8") as f:
        trained = json.load(f)
    assert first["export"]["published_version"] in json.dumps(trained)  # warm-started from the published version
    assert second["blessing"]["baseline_metrics"]["accuracy"] == pytest.approx(first["metrics"]["accuracy"], abs=1e-6)
    assert second["blessed"], second["blessing"]


def test_the_text_transformer_runs_end_to_end_with_its_own_metric_names(tmp_path):
    root = make_records("text_classifier", str(tmp_path / "records"))
    output = str(tmp_path / "out")
    args = user_args("text_classifier", "token_transformer.model:model_fn", root, "label_ids")
    args += ["--predict-data", os.path.join(root, "predict.tfrecord"), "--set", "training.train_steps=300"]
    args += ["--set", 'blessing.thresholds={"eval_accuracy": 0.8}', "--set", "blessing.comparison_metric=eval_loss"]
    args += ["--set", 'blessing.directions={"eval_accuracy": "higher", "eval_loss": "lower"}']
    args += ["--slice", "label_ids", "--set", "blessing.min_slice_rows=1"]  # sliced in the same eval pass
    summary = run_local(output, *args)

    assert_released(summary)
    assert set(summary["metrics"]) == {"eval_accuracy", "eval_loss"}  # the slices' metrics apart
    sliced = summary["slices"]
    assert sorted(e["name"] for e in sliced["worst"]) == ["label_ids=0", "label_ids=1"]
    assert all(set(e["metrics"]) == {"eval_accuracy", "eval_loss"} and e["judged"] for e in sliced["worst"])
    predict_records = records(os.path.join(root, "predict.tfrecord"))
    rows = prediction_rows(summary)
    assert [r["index"] for r in rows] == list(range(len(predict_records)))
    assert all(len(r["probabilities"]) == 2 for r in rows)

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")  # the run reproduces, stage by stage, from its record alone
    again = [TPU_PIPELINE, "reproduce", os.path.join(output, "summary.json"), "--output", str(tmp_path / "again")]
    proc = subprocess.run(again, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0 and "reproduced: every stage's outputs have the recorded fingerprints" in proc.stdout, (
        proc.stdout[-3000:] + proc.stderr[-3000:]
    )


def write_records(path: str, examples: list) -> str:
    with tf.io.TFRecordWriter(path) as writer:
        for features in examples:
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
    return path


def floats(values) -> tf.train.Feature:
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def ints(values) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def failed_run(output: str, *args: str) -> str:
    summary = run_local(output, *args, exit_code=1)
    assert summary["status"] == "failed" and summary["stage"] == "prepare"
    return summary["error"]


def test_records_that_do_not_match_the_spec_fail_the_prepare_stage_naming_file_record_and_feature(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"image": {"dtype": "float32", "shape": [4]}, "label": {"dtype": "int64", "shape": []}}))
    good = [{"image": floats([1.0, 2.0, 3.0, 4.0]), "label": ints([i % 2])} for i in range(40)]
    lacking = good[:7] + [{"label": ints([1])}] + good[8:]
    data = write_records(str(tmp_path / "lacking.tfrecord"), lacking)
    args = [
        "--model-fn",
        "digits_cnn.model:model_fn",
        "--code",
        os.path.join(EXAMPLES, "image_cnn"),
        "--label",
        "label",
    ]
    args += ["--set", "blessing.comparison_metric=accuracy", "--feature-spec", str(spec)]
    error = failed_run(str(tmp_path / "a"), *args, "--data", data)
    assert (
        f"{data}: record 7: feature 'image': expected 4 value(s) in float_list (float32, shape [4]), found no such "
        "feature in the record" in error
    )

    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"image": {"dtype": "int64", "shape": [4]}, "label": {"dtype": "int64", "shape": []}}))
    data = write_records(str(tmp_path / "good.tfrecord"), good)
    args[args.index(str(spec))] = str(wrong)
    error = failed_run(str(tmp_path / "b"), *args, "--data", data)
    assert (
        f"{data}: record 0: feature 'image': expected 4 value(s) in int64_list (int64, shape [4]), found 4 value(s) "
        "in float_list" in error
    )
