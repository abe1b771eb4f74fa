"""Batch prediction: padding filtered, input order, keys joined, atomic sharded JSONL (local and gs://).

One tiny linear model is trained once per module; expected outputs are computed in NumPy from its checkpoint
variables, so every row's values prove the prediction was joined to the right key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List

import numpy as np
import pytest
import repo
import synthetic
import tensorflow as tf

from estimator_lib import estimator, storage
from estimator_lib.config import JobConfig, ModelConfig, TPUSettings, TrainingConfig
from estimator_lib.data import records
from estimator_lib.model import inputs
from estimator_lib.predict import (
    PredictionError,
    batch_predict,
    fetched_keys,
    read_predictions,
    real_rows,
    shard_name,
    verify_output,
)
from estimator_lib.schema import INDEX_FEATURE, PADDING_FEATURE, Schema

B = 8  # predict batch size
REPO = repo.ROOT


@dataclasses.dataclass(frozen=True)
class Trained:
    job: JobConfig
    schema: Schema
    model_dir: str
    root: str

    def weights(self) -> Dict[str, np.ndarray]:
        ckpt = tf.train.latest_checkpoint(self.model_dir)
        names = ("categorical_weights/f_colour", "numeric/kernel", "numeric/bias")
        return {n: tf.train.load_variable(ckpt, f"linear/{n}") for n in names}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    root = str(tmp_path_factory.mktemp("predict"))
    schema = synthetic.make_schema("multiclass")
    train_pattern, _ = synthetic.write_dataset(
        os.path.join(root, "train"), synthetic.make_rows(96, seed=3, task="multiclass"), schema
    )
    job = JobConfig(
        tpu=TPUSettings(iterations_per_loop=10),
        training=TrainingConfig(train_batch_size=16, predict_batch_size=B, train_steps=30, save_checkpoints_steps=30),
        model=ModelConfig(family="linear"),
    )
    estimator.train(job, schema, train_pattern, os.path.join(root, "model"))
    return Trained(job, schema, os.path.join(root, "model"), root)


def write_rows(trained: Trained, name: str, n: int, seed: int = 11):
    """n prediction rows in 2 round-robin files; returns (pattern, rows in input order with their keys)."""
    rows = synthetic.make_rows(n, seed=seed, task="multiclass")
    pattern, _ = synthetic.write_dataset(os.path.join(trained.root, name), rows, trained.schema, shards=2)
    order = [i for shard in range(2) for i in range(shard, n, 2)]  # file order: part-0 then part-1
    return pattern, [dict(rows[i], key=f"row-{i}") for i in order]


def expected_probabilities(trained: Trained, rows: List[Dict[str, Any]]) -> np.ndarray:
    """softmax(colour weight + standardised numerics @ W + b), missing numerics imputed with the mean."""
    w = trained.weights()
    colour = np.array([synthetic.COLORS.index(r["colour"]) for r in rows], dtype=np.int64)
    x1 = np.array([(r["x 1"] - 2.0) / 3.0 for r in rows], dtype=np.float32)
    x2 = np.array([0.0 if r["x-2"] is None else (r["x-2"] + 1.0) / 0.5 for r in rows], dtype=np.float32)
    numerics = np.stack([x1, x2], axis=1).reshape(len(rows), 2)
    logits = w["categorical_weights/f_colour"][colour] + numerics @ w["numeric/kernel"] + w["numeric/bias"]
    logits = logits.astype(np.float64)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("n", [0, 1, B - 1, B, B + 1, 7 * B + 3])
def test_exactly_n_predictions_in_input_order_with_own_keys(trained, tmp_path, n):
    pattern, rows = write_rows(trained, f"data-{n}", n)
    out = str(tmp_path / "out")

    result = batch_predict(trained.job, trained.schema, trained.model_dir, pattern, out)

    got = read_predictions(out)
    assert result.count == n and len(got) == n
    assert [g["key"] for g in got] == [r["key"] for r in rows]
    assert result.manifest["count"] == n and result.manifest["shards"][0]["rows"] == n
    assert result.shards == (os.path.join(out, "predictions-00000-of-00001.jsonl"),)
    if n:
        probs = np.array([[g["probabilities"][c] for c in ("low", "mid", "high")] for g in got])
        want = expected_probabilities(trained, rows)
        np.testing.assert_allclose(probs, want, atol=2e-6)
        assert [g["class_id"] for g in got] == want.argmax(axis=1).tolist()
        assert [g["class"] for g in got] == [("low", "mid", "high")[k] for k in want.argmax(axis=1)]
        assert list(got[0]) == ["key", "file", "record", "class", "class_id", "probabilities"]
        files = inputs.resolve_files(pattern)  # 2 files, rows dealt round-robin: (n + 1) // 2 in the first
        assert [(g["file"], g["record"]) for g in got] == [(files[0], i) for i in range((n + 1) // 2)] + [
            (files[1], i) for i in range(n // 2)
        ]


@pytest.mark.parametrize("long_from", [None, 0, 13])
def test_keys_of_any_length_and_bytes_come_back_with_their_rows(trained, tmp_path, long_from):
    """Keys travel packed through the model (up to 64 bytes); a longer key switches to reading the records."""
    n = 3 * B + 5
    rows = synthetic.make_rows(n, seed=5, task="multiclass")
    keys = [f"k{i}" for i in range(n)]
    keys[1], keys[2], keys[3], keys[4] = "x" * 64, "ends-in-nul\0", "\0", "ključ €"
    keys[5], keys[6] = 'quote " and \\ and \n', "y" * 62 + "é"  # 64 bytes, ending inside "é"
    if long_from is not None:
        keys[long_from] = "long-" + "z" * 70
        keys[long_from + 2] = "x" * 65
    directory = tmp_path / "keys"
    directory.mkdir()
    records.write_tfrecord(
        str(directory / "part-00000.tfrecord"),
        [records.encode_example(r, trained.schema, key=k) for r, k in zip(rows, keys)],
    )
    out = str(tmp_path / "out")

    result = batch_predict(trained.job, trained.schema, trained.model_dir, str(directory / "*.tfrecord"), out)

    got = read_predictions(out)
    assert result.count == n and [g["key"] for g in got] == keys
    probs = np.array([[g["probabilities"][c] for c in ("low", "mid", "high")] for g in got])
    np.testing.assert_allclose(probs, expected_probabilities(trained, rows), atol=2e-6)
    assert result.manifest["keys"]["records_read_again_from_row"] == (None if long_from is None else long_from // B * B)


def dnn_trained(trained: Trained) -> Trained:
    """A small DNN on the module's training rows (matrix products and a softmax over whole batches)."""
    job = dataclasses.replace(trained.job, model=ModelConfig(family="dnn", hidden_units=(16, 8), embedding_dim=4))
    model_dir = os.path.join(trained.root, "dnn-model")
    if not os.path.exists(model_dir):
        train_pattern = os.path.join(trained.root, "train", "part-*.tfrecord")
        estimator.train(job, trained.schema, train_pattern, model_dir)
    return Trained(job, trained.schema, model_dir, trained.root)


@pytest.mark.determinism
@pytest.mark.parametrize("family", ["linear", "dnn"])
def test_several_batches_per_session_run_write_the_bytes_of_one_batch_per_run(trained, tmp_path, monkeypatch, family):
    """On CPU one session.run predicts several whole batches (inputs.PREDICT_ROWS_PER_RUN rows; for inputs
    of inputs.PREDICT_LOOP_MIN_ROWS rows on), batch by batch: every output file is byte for byte the
    one-batch-per-run output, whatever the grouping, with missing values, passthrough columns, keys too long to
    travel packed, a last partial batch and shards."""
    model = dnn_trained(trained) if family == "dnn" else trained
    n = 7 * B + 3  # a last partial batch; elements of 3 batches end with a shorter one
    rows = synthetic.make_rows(n, seed=13, task="multiclass")  # "x-2" missing in every 17th row
    keys = [f"row-{i}" if i != 4 * B + 2 else "long-" + "z" * 70 for i in range(n)]
    directory = tmp_path / "data"
    directory.mkdir()
    examples = [records.encode_example(r, model.schema, key=k) for r, k in zip(rows, keys)]
    records.write_tfrecord(str(directory / "part-00000.tfrecord"), examples[:30])
    records.write_tfrecord(str(directory / "part-00001.tfrecord"), examples[30:])

    monkeypatch.setattr(inputs, "PREDICT_LOOP_MIN_ROWS", 0)  # group the batches of this small input too

    def files(rows_per_run: int, passthrough: List[str]) -> Dict[str, bytes]:
        monkeypatch.setattr(inputs, "PREDICT_ROWS_PER_RUN", rows_per_run)
        out = tmp_path / f"out-{rows_per_run}-{len(passthrough)}"
        args = (model.job, model.schema, model.model_dir, str(directory / "*.tfrecord"), str(out))
        batch_predict(*args, num_shards=3, passthrough=passthrough, num_examples=n)
        return {name: (out / name).read_bytes() for name in sorted(os.listdir(out))}

    default = inputs.PREDICT_ROWS_PER_RUN  # every row in one run here
    for passthrough, read_again_from in (([], 4 * B), (["x-2", "colour"], 0)):
        one_per_run = files(B, passthrough)
        assert files(3 * B, passthrough) == one_per_run
        assert files(default, passthrough) == one_per_run
        manifest = json.loads(one_per_run["manifest.json"])
        assert manifest["count"] == n and manifest["keys"]["records_read_again_from_row"] == read_again_from
        lines = [json.loads(line) for s in range(3) for line in one_per_run[shard_name(s, 3)].splitlines()]
        assert [line["key"] for line in lines] == keys
    assert [line["x-2"] for line in lines][:18:17] == [None, None]


def test_passthrough_columns_keep_original_names_values_and_nulls(trained, tmp_path):
    pattern, rows = write_rows(trained, "data-pass", 20)
    out = str(tmp_path / "out")

    batch_predict(trained.job, trained.schema, trained.model_dir, pattern, out, passthrough=["x-2", "colour", "target"])

    got = read_predictions(out)
    assert list(got[0]) == ["key", "file", "record", "x-2", "colour", "target", "class", "class_id", "probabilities"]
    assert [g["colour"] for g in got] == [r["colour"] for r in rows]
    assert [g["target"] for g in got] == [r["target"] for r in rows]
    # Stored as float32; written as the shortest text that reads back as the same float32.
    as_float32 = [None if g["x-2"] is None else np.float32(g["x-2"]) for g in got]
    assert as_float32 == [None if r["x-2"] is None else np.float32(r["x-2"]) for r in rows]
    assert got[0]["x-2"] is None  # row-0: every 17th row has "x-2" missing


def test_shards_are_consecutive_ranges_with_checksums(trained, tmp_path):
    pattern, rows = write_rows(trained, "data-shards", 7 * B + 3)
    out = str(tmp_path / "out")

    result = batch_predict(trained.job, trained.schema, trained.model_dir, pattern, out, num_shards=3)

    names = [shard_name(i, 3) for i in range(3)]
    assert result.shards == tuple(os.path.join(out, n) for n in names)
    assert [s["rows"] for s in result.manifest["shards"]] == [20, 20, 19]
    keys = []
    for name, entry in zip(names, result.manifest["shards"]):
        data = open(os.path.join(out, name), "rb").read()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
        keys += [json.loads(line)["key"] for line in data.splitlines()]
    assert keys == [r["key"] for r in rows]
    assert sorted(os.listdir(out)) == sorted(names + ["_COMMITTED", "manifest.json"])
    assert json.load(open(os.path.join(out, "manifest.json"))) == result.manifest == verify_output(out)


def test_gcs_output_is_committed_and_matches_local(trained, tmp_path, gcs_prefix):
    pattern, _ = write_rows(trained, "data-gcs", B + 1)
    local = str(tmp_path / "out")
    remote = f"{gcs_prefix}/predictions"

    batch_predict(trained.job, trained.schema, trained.model_dir, pattern, local, num_shards=2)
    result = batch_predict(trained.job, trained.schema, trained.model_dir, pattern, remote, num_shards=2)

    assert storage.is_committed(remote)
    assert result.shards == (f"{remote}/{shard_name(0, 2)}", f"{remote}/{shard_name(1, 2)}")
    assert read_predictions(remote) == read_predictions(local)
    assert storage.list_files(remote) == sorted([f"{remote}/_COMMITTED", f"{remote}/manifest.json", *result.shards])


def test_failed_run_publishes_nothing_and_keeps_previous_output(trained, tmp_path):
    pattern, _ = write_rows(trained, "data-fail", B + 1)
    out = str(tmp_path / "out")
    batch_predict(trained.job, trained.schema, trained.model_dir, pattern, out)
    before = read_predictions(out)

    with pytest.raises(tf.errors.OpError, match="expected to contain 10 elements but contained only 9"):
        batch_predict(trained.job, trained.schema, trained.model_dir, pattern, out, num_examples=B + 2)

    assert read_predictions(out) == before
    assert sorted(os.listdir(tmp_path)) == ["out"]  # the staging directory was removed


def test_real_rows_drops_padding_and_checks_order():
    def batch(index, padding):
        return {
            INDEX_FEATURE: np.array(index, np.int32),
            PADDING_FEATURE: np.array(padding, np.float32),
            "class_ids": np.array(index, np.int32) * 10,
        }

    got = list(real_rows(iter([batch([0, 1, 2], [0, 0, 0]), batch([3, 4, 5], [0, 1, 1])]), count=4))
    assert [g["class_ids"].tolist() for g in got] == [[0, 10, 20], [30]]
    assert all(set(g) == {"class_ids"} for g in got)

    with pytest.raises(
        PredictionError,
        match=r"expected real rows 0\.\.2 then padding \(index >= 4\), got "
        r"example_index=\[0, 2, 1\]",
    ):
        list(real_rows(iter([batch([0, 2, 1], [0, 0, 0])]), count=4))
    with pytest.raises(PredictionError, match="out of order"):  # a padded row inside the real range
        list(real_rows(iter([batch([0, 1, 2], [0, 1, 0])]), count=4))
    with pytest.raises(PredictionError, match="the model returned 3 real rows for 4 input rows"):
        list(real_rows(iter([batch([0, 1, 2], [0, 0, 0])]), count=4))


def test_argument_errors_name_the_setting(trained, tmp_path):
    pattern, _ = write_rows(trained, "data-args", 3)
    args = (trained.job, trained.schema, trained.model_dir, pattern, str(tmp_path / "out"))
    with pytest.raises(
        ValueError,
        match=r"passthrough column 'weight' is not in the schema; use original column "
        r"names from: \['colour', 'target', 'x 1', 'x-2'\]",
    ):
        batch_predict(*args, passthrough=["weight"])
    with pytest.raises(ValueError, match="num_shards=0 must be a positive integer"):
        batch_predict(*args, num_shards=0)
    with pytest.raises(FileNotFoundError, match="no checkpoint in model_dir=.* to predict with; train first"):
        batch_predict(trained.job, trained.schema, str(tmp_path / "empty"), pattern, str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


_KILL_SCRIPT = """
import sys
from estimator_lib.config import JobConfig
from estimator_lib.predict import batch_predict
from estimator_lib.schema import Schema
job, schema = JobConfig.from_json(open(sys.argv[1]).read()), Schema.from_json(open(sys.argv[2]).read())
batch_predict(job, schema, sys.argv[3], sys.argv[4], sys.argv[5], num_shards=4)
"""


@pytest.mark.slow
def test_sigkill_midway_leaves_no_committed_output_and_rerun_commits_all(trained, tmp_path):
    n = 24000
    pattern, rows = write_rows(trained, "data-kill", n, seed=5)
    (tmp_path / "job.json").write_text(trained.job.to_json())
    (tmp_path / "schema.json").write_text(trained.schema.to_json())
    out = str(tmp_path / "out")
    env = dict(os.environ, PYTHONPATH=REPO)
    argv = [
        sys.executable,
        "-c",
        _KILL_SCRIPT,
        str(tmp_path / "job.json"),
        str(tmp_path / "schema.json"),
        trained.model_dir,
        pattern,
        out,
    ]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        staging = _wait_for_second_shard(tmp_path, proc, timeout=120)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()

    assert not os.path.exists(out) and not storage.is_committed(out)
    assert "manifest.json" not in os.listdir(staging)  # killed midway: the first shard was done, not the run

    result = batch_predict(trained.job, trained.schema, trained.model_dir, pattern, out, num_shards=4)

    assert result.count == n and verify_output(out)["count"] == n
    assert [r["key"] for r in read_predictions(out)] == [r["key"] for r in rows]
    # The rerun deleted the killed run's staging directory (its owner process is gone) and its own.
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".staging-")]


def _wait_for_second_shard(directory, proc, timeout: float) -> str:
    """Polls until the subprocess's staging directory holds shard 1 (shard 0 complete); returns it."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "the prediction subprocess ended before it could be killed midway"
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if name.startswith(".staging-out-") and os.path.exists(os.path.join(path, shard_name(1, 4))):
                return path
        time.sleep(0.005)
    raise AssertionError("the prediction subprocess never reached its second shard")


def test_fetched_keys_are_the_outputs_row_markers_and_packed_keys_not_the_logits():
    marks = [INDEX_FEATURE, PADDING_FEATURE, "example_key_bytes"]
    assert fetched_keys(synthetic.make_schema("multiclass")) == ["class_ids", "probabilities", *marks]
    assert fetched_keys(synthetic.make_schema("regression")) == ["predictions", *marks]
