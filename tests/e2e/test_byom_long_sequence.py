"""A user model with a [1024] token sequence publishes through `run-local`, and a run that failed at release
resumes and publishes: nothing about the model travels on a command line, whatever its size.

The model is a user package written here (an embedding bag over 1,024 var-length tokens); its records are
generated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib import release

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
LENGTH, VOCAB = 1024, 64
MODEL = """
import tensorflow as tf

def metric_fn(labels, logits):
    return {"accuracy": tf.compat.v1.metrics.accuracy(labels, tf.argmax(logits, -1, output_type=tf.int32))}

def model_fn(features, labels, mode, params):
    tokens = features["tokens"]  # int32 [B, 1024], 0 is padding
    table = tf.compat.v1.get_variable("embeddings", [params["vocab"], params["width"]])
    mask = tf.cast(tokens > 0, tf.float32)[..., None]
    embedded = tf.einsum("blv,vw->blw", tf.one_hot(tokens, params["vocab"]), table)  # dense gradients: a TPU's way
    pooled = tf.reduce_sum(embedded * mask, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0)
    logits = tf.compat.v1.layers.dense(pooled, 2)
    spec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec
    if mode == tf.estimator.ModeKeys.PREDICT:
        return spec(mode, predictions={"logits": logits})
    labels = tf.cast(labels, tf.int32)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    if mode == tf.estimator.ModeKeys.EVAL:
        return spec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
    optimizer = tf.compat.v1.train.AdamOptimizer(0.05)
    if params["use_tpu"]:
        optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
    return spec(mode, loss=loss, train_op=train_op)
"""


def write_records(path: str, count: int, seed: int) -> None:
    """Sequences of 200 to 1,024 tokens; the label says whether low tokens dominate."""
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(count):
            label = int(rng.integers(2))
            tokens = rng.integers(1, VOCAB // 2, rng.integers(200, LENGTH + 1)) + label * (VOCAB // 2 - 1)
            features = {
                "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=tokens.tolist())),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())


def run(output: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [TPU_PIPELINE, "run-local", "--output", output, *args], capture_output=True, text=True, env=env, timeout=900
    )


def test_a_1024_token_sequence_model_publishes_and_a_run_failed_at_release_resumes(tmp_path):
    code = tmp_path / "code" / "seq_model"
    code.mkdir(parents=True)
    (code / "__init__.py").write_text("")
    (code / "model.py").write_text(MODEL)
    spec = tmp_path / "spec.json"
    tokens = {"dtype": "int32", "shape": [LENGTH], "var_len": True, "default": 0}
    spec.write_text(json.dumps({"tokens": tokens, "label": {"dtype": "int32", "shape": []}}))  # int32: what a TPU takes
    write_records(str(tmp_path / "train.tfrecord"), 400, seed=1)
    write_records(str(tmp_path / "eval.tfrecord"), 90, seed=2)
    output = str(tmp_path / "out")
    published = os.path.join(output, "published")
    os.makedirs(published)
    with open(os.path.join(published, "versions"), "w") as f:  # a file where the versions go: release fails
        f.write("in the way\n")
    args = ["--model-fn", "seq_model.model:model_fn", "--code", str(tmp_path / "code"), "--feature-spec", str(spec)]
    args += ["--data", str(tmp_path / "train.tfrecord"), "--eval-data", str(tmp_path / "eval.tfrecord")]
    args += ["--label", "label", "--hparams", "vocab=64", "--hparams", "width=8", "--set", "training.train_steps=60"]
    args += ["--set", "blessing.comparison_metric=accuracy", "--set", 'blessing.thresholds={"accuracy": 0.9}']

    failed = run(output, *args)
    assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-3000:]
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["stage"] == "release" and "Argument list too long" not in summary["error"]
    assert release.latest(published) is None

    os.remove(os.path.join(published, "versions"))
    resumed = run(output, *args, "--resume")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["run"]["attempts"] == 2 and summary["export"]["published"]
    assert release.latest(published).version == summary["export"]["published_version"]
    signatures = summary["export"]["signatures"]
    assert signatures  # the export's signatures take the [1024] sequence
