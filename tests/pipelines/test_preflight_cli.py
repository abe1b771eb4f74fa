"""`tpu-pipeline preflight` and the preflight `submit` runs: a built-in family on the embedded penguins, an example
user model, a user model made not to fit (a 50M x 64 embedding with Adam), and the exit codes. Nothing runs on a
TPU; the Vertex AI API is the fake of tests/vertex_api.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import repo
import tensorflow as tf
from google.auth.credentials import AnonymousCredentials
from vertex_api import FakeVertexAPI

from pipelines import cli

IMAGE = "us-central1-docker.pkg.dev/proj/repo/tpu-pipeline@sha256:" + "cd" * 32
HUGE_MODEL = """
import tensorflow as tf

def model_fn(features, labels, mode, params):
    table = tf.compat.v1.get_variable("item_embedding", [50_000_000, 64])
    pooled = tf.reduce_mean(tf.nn.embedding_lookup(table, features["ids"]), axis=1)
    logits = tf.compat.v1.layers.dense(pooled, 1, name="out")[:, 0]
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, predictions={"logit": logits})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss)
    optimizer = tf.compat.v1.train.AdamOptimizer(0.001)
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)
"""


def preflight(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["preflight", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_embedded_penguins_fit_v2_8_and_the_json_says_so(capsys):
    code, out, _ = preflight(capsys, "--tpu", "v2-8", "--json")
    found = json.loads(out)
    assert code == 0 and (found["tpu_type"], found["accelerator"], found["cores"]) == ("v2-8", "TPU_V2", 8)
    assert found["verdict"] == "fits" and found["memory"]["batch"] == 64 // 8  # training.train_batch_size 64
    assert found["train_steps"] > 0 and found["input"]["keeps_up"]
    assert "no price for cloud-tpu + TPU_V2 x8 in region us-central1" in found["price_note"]
    predict = found["predict"]  # the eval split, in steps of the per-core predict batch on 8 cores
    assert predict["batch"] == 64 // 8 and predict["steps"] == -(-predict["rows"] // 64)  # predict_batch_size 64
    assert predict["flops"] > 0 and predict["seconds"] == pytest.approx(predict["steps"] * predict["step_seconds"])


def test_an_example_user_model_fits_v3_8(capsys, tmp_path):
    code_dir = os.path.join(repo.ROOT, "examples", "image_cnn")
    records = tmp_path / "digits"
    subprocess.run([sys.executable, os.path.join(code_dir, "make_records.py"), str(records)], check=True)
    argv = [
        *("--tpu", "v3-8", "--model-fn", "digits_cnn.model:model_fn", "--code", code_dir),
        *("--feature-spec", str(records / "feature_spec.json"), "--data", str(records / "train.tfrecord")),
        *("--label", "label", "--hparams-file", os.path.join(code_dir, "hparams.json")),
        *("--set", "blessing.comparison_metric=accuracy"),  # a run's setting: preflight resolves them all
    ]
    code, out, err = preflight(capsys, *argv)
    lines = out.splitlines()
    assert code == 0, err
    assert lines[0].startswith("preflight v3-8: fits (peak ") and "of 16 GiB per core" in lines[0]
    assert lines[1].startswith("  memory per core at batch 8: parameters ")
    assert any("(cnn/conv2d/Conv2D)" in line for line in lines)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--tpu", "v4-8"], "--tpu 'v4-8': Vertex AI custom training offers TPU v2, v3 and v5e, not v4"),
        (["--set", "training.train_batch_size=12"], "train_batch_size=12"),
    ],
)
def test_a_bad_command_line_exits_2_before_any_work(capsys, argv, message):
    code, _, err = preflight(capsys, *argv)
    assert code == 2 and message in err


def huge_model(tmp_path) -> list[str]:
    """A user model whose 50M x 64 float32 embedding (12.8 GB, 23.8 GiB padded) and its Adam slots fit no TPU core,
    its records, and the flags that name them."""
    package = tmp_path / "code" / "huge"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(textwrap.dedent(HUGE_MODEL))
    spec = {"ids": {"dtype": "int32", "shape": [4]}, "label": {"dtype": "float32", "shape": []}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    with tf.io.TFRecordWriter(str(tmp_path / "train.tfrecord")) as writer:
        for i in range(64):
            feature = {
                "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[i, i + 1, i + 2, i + 3])),
                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[i % 2])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return [
        *("--model-fn", "huge.model:model_fn", "--code", str(tmp_path / "code")),
        *("--feature-spec", str(tmp_path / "spec.json"), "--data", str(tmp_path / "train.tfrecord")),
        *("--label", "label", "--set", "blessing.comparison_metric=accuracy"),
    ]


def test_a_model_that_does_not_fit_is_refused_by_submit_before_any_upload(monkeypatch, capsys, tmp_path):
    api = FakeVertexAPI(monkeypatch)
    root = "gs://bucket/pipeline-root"
    argv = ["submit", "--project", "p", "--pipeline-root", root, "--image", IMAGE, "--tpu", "v2-8", "--dry-run"]
    code = cli.main([*argv, *huge_model(tmp_path)], credentials=AnonymousCredentials())
    out, err = capsys.readouterr()
    assert code == 1, err
    assert out == "" and api.pipeline_jobs == []
    error = err.splitlines()[-1]
    assert error.startswith(
        "tpu-pipeline submit: error: the model does not fit TPU v2-8's memory at training.train_batch_size=64: "
        "preflight v2-8: does not fit (peak "
    )
    assert "of 8 GiB per core; batch 1 does not fit); step >= " in error
    assert "; the largest buffers: parameter item_embedding: " in error
    assert "float32[50000000,64], 23.8 GiB, 11.9 GiB padding" in error and "--allow-no-fit" in error
    assert err.splitlines()[0].startswith("preflight v2-8: does not fit (peak ")

    code = preflight(capsys, "--tpu", "v2-8", *huge_model(tmp_path / "again"))[0]
    assert code == 1
