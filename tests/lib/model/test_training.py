"""Training and evaluation through TPUEstimator on CPU, on tiny real data."""

from __future__ import annotations

import dataclasses
import glob
import logging
import os

import numpy as np
import plugin_model
import pytest
import reference_metrics
import synthetic
import tensorflow as tf

from estimator_lib import estimator
from estimator_lib.config import JobConfig, TPUSettings, TrainingConfig
from estimator_lib.data import records
from estimator_lib.export import export_model
from estimator_lib.model import inputs, warm_start
from estimator_lib.model.model_fn import predict_loop

ModeKeys = tf.estimator.ModeKeys


def make_job(**training) -> JobConfig:
    base = dict(train_steps=300, save_checkpoints_steps=100, train_batch_size=64, eval_batch_size=64)
    base.update(training)
    return JobConfig(tpu=TPUSettings(iterations_per_loop=50, strict=True), training=TrainingConfig(**base))


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """Train (2000 rows) and eval (1000 rows) splits for each task; eval is not a multiple of 64."""
    root = tmp_path_factory.mktemp("data")
    out = {}
    for task in ("binary", "multiclass", "regression"):
        schema = synthetic.make_schema(task)
        train, _ = synthetic.write_dataset(str(root / task / "train"), synthetic.make_rows(2000, 1, task), schema, 3)
        evals, _ = synthetic.write_dataset(str(root / task / "eval"), synthetic.make_rows(1000, 2, task), schema, 2)
        out[task] = (schema, train, evals)
    return out


@pytest.fixture(scope="module")
def trained(datasets, tmp_path_factory):
    """One trained model per task (300 steps)."""
    models = {}
    for task, (schema, train, _) in datasets.items():
        model_dir = str(tmp_path_factory.mktemp(f"model_{task}"))
        estimator.train(make_job(), schema, train, model_dir)
        models[task] = model_dir
    return models


def real_rows_logits_and_labels(job, schema, model_dir, pattern):
    """Predicts every eval row (padded batches), drops padding, and returns (labels, logits) in file order."""
    est = estimator.build_estimator(job, schema, model_dir)
    input_fn = inputs.predict_input_fn_builder(pattern, schema)
    logits, index = [], []
    for batch in est.predict(input_fn, yield_single_examples=False):
        real = batch["is_padding"] == 0
        if "logits" in batch:
            logits.append(batch["logits"][real])
        else:
            logits.append(((batch["predictions"][real] - schema.label.mean) / schema.label.std)[:, None])
        index.append(batch["example_index"][real])
    rows = [records.decode_example(r, schema) for r in records.read_tfrecords(inputs.resolve_files(pattern))]
    if schema.label.task == "classification":
        labels = np.array([schema.label.classes.index(r["target"]) for r in rows])
    else:
        labels = np.array([r["target"] for r in rows], dtype=np.float64)
    np.testing.assert_array_equal(np.concatenate(index), np.arange(len(rows)))
    return labels, np.concatenate(logits)


def test_training_lowers_the_loss_and_resumes(datasets, tmp_path):
    schema, train, evals = datasets["binary"]
    model_dir = str(tmp_path / "model")
    first = estimator.train(make_job(train_steps=1), schema, train, model_dir)
    before = estimator.evaluate(make_job(), schema, evals, model_dir).metrics["loss"]
    second = estimator.train(make_job(train_steps=200), schema, train, model_dir)
    after = estimator.evaluate(make_job(), schema, evals, model_dir)
    assert (first.global_step, second.global_step) == (1, 200)
    assert after.metrics["loss"] < 0.6 * before
    assert after.metrics["accuracy"] > 0.85


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
@pytest.mark.parametrize("eval_batch_size", [64, 2048])
def test_metrics_ignore_padding_and_match_numpy(datasets, trained, task, eval_batch_size):
    schema, _, evals = datasets[task]
    job = make_job(eval_batch_size=eval_batch_size, predict_batch_size=eval_batch_size)
    result = estimator.evaluate(job, schema, evals, trained[task])
    assert (result.num_examples, result.steps) == (1000, 16 if eval_batch_size == 64 else 1)
    labels, logits = real_rows_logits_and_labels(job, schema, trained[task], evals)
    if task == "binary":
        expected = reference_metrics.binary(labels, logits)
    elif task == "multiclass":
        expected = reference_metrics.multiclass(labels, logits, schema.label.classes)
    else:
        expected = reference_metrics.regression(labels, logits, schema.label.mean, schema.label.std)
    assert sorted(result.metrics) == sorted(expected)
    for name, value in expected.items():
        assert result.metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-5), name


def _variables(model_dir):
    checkpoint = tf.train.latest_checkpoint(model_dir)
    return {name: tf.train.load_variable(checkpoint, name) for name, _ in tf.train.list_variables(checkpoint)}


@pytest.mark.determinism
def test_same_seed_gives_bitwise_identical_variables(datasets, tmp_path):
    schema, train, _ = datasets["multiclass"]
    job = make_job(train_steps=100)
    runs = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        model_dir = str(tmp_path / name)
        estimator.train(job.with_overrides({"training.seed": seed}), schema, train, model_dir)
        runs[name] = _variables(model_dir)
    assert sorted(runs["a"]) == sorted(runs["b"])
    for name in runs["a"]:
        assert runs["a"][name].tobytes() == runs["b"][name].tobytes(), name
    kernel = "dnn/hidden_0/kernel"
    assert runs["a"][kernel].tobytes() != runs["c"][kernel].tobytes()


@pytest.mark.determinism
def test_training_continued_from_a_checkpoint_equals_an_uninterrupted_run_bitwise(datasets, tmp_path):
    """A train() call that stops at step 70 (a run killed after its checkpoint, or one round of training) and a
    second call that continues from the checkpoint feed the same batches as one uninterrupted call: the final
    variables are equal bit for bit. 2000 rows in batches of 64: step 70 is in the third epoch."""
    schema, train, _ = datasets["binary"]
    job = make_job(train_steps=100, save_checkpoints_steps=50)
    whole, split = str(tmp_path / "whole"), str(tmp_path / "split")
    estimator.train(job, schema, train, whole)
    # The same job's attempt, stopped after its step-70 checkpoint (the learning-rate schedule spans the budget,
    # so a shorter budget would not be the same run).
    attempt = inputs.train_input_fn_builder(train, schema, job.training.seed, job.training.shuffle_buffer_size, split)
    estimator.build_estimator(job, schema, split).train(attempt, max_steps=70)
    assert inputs.start_step(split) == 70
    estimator.train(job, schema, train, split)
    a, b = _variables(whole), _variables(split)
    assert sorted(a) == sorted(b) and int(b["global_step"]) == 100
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name


@pytest.mark.determinism
def test_several_steps_per_session_run_equal_one_step_per_run_bitwise(datasets, tmp_path):
    """estimator.train runs iterations_per_loop (50) steps per session.run on CPU, stops at a budget that is not
    a multiple of it (130), and saves checkpoints at the same steps as one step per run; the variables equal
    those of one step per run (an estimator built without a target step, on the uncached input) bit for bit."""
    schema, train, _ = datasets["multiclass"]
    job = make_job(train_steps=130, save_checkpoints_steps=50, keep_checkpoint_max=10)
    looped, single = str(tmp_path / "looped"), str(tmp_path / "single")
    estimator.train(job, schema, train, looped)
    one_step = inputs.train_input_fn_builder(train, schema, job.training.seed, job.training.shuffle_buffer_size)
    estimator.build_estimator(job, schema, single).train(one_step, max_steps=130)
    steps = lambda d: sorted(int(p.split("-")[-1].split(".")[0]) for p in glob.glob(f"{d}/model.ckpt-*.index"))
    assert steps(looped) == steps(single) == [0, 50, 100, 130]
    a, b = _variables(looped), _variables(single)
    assert sorted(a) == sorted(b) and int(a["global_step"]) == 130
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name


class CountRuns(tf.compat.v1.train.SessionRunHook):
    def __init__(self):
        self.runs = 0

    def after_run(self, run_context, run_values):
        self.runs += 1


def test_training_stops_after_the_session_run_that_reaches_the_target_step(datasets, tmp_path):
    """50 steps per session.run, max_steps 130: three runs (50, 50, 30 steps), not a fourth one of no step."""
    schema, train, _ = datasets["binary"]
    job = make_job(train_steps=130)
    model_dir = str(tmp_path / "model")
    input_fn = inputs.train_input_fn_builder(train, schema, 1, 100, model_dir, num_examples=2000)
    counter = CountRuns()
    estimator.build_estimator(job, schema, model_dir, target_step=130).train(input_fn, max_steps=130, hooks=[counter])
    assert (counter.runs, inputs.start_step(model_dir)) == (3, 130)


def test_plugin_model_trains_and_every_batch_is_static_and_full(datasets, tmp_path):
    schema, train, evals = datasets["binary"]
    plugin_model.SEEN.clear()
    job = make_job(train_steps=50, save_checkpoints_steps=50, eval_batch_size=32, predict_batch_size=16)
    job = job.with_overrides({"model.family": "plugin_model:tiny_logits"})
    model_dir = str(tmp_path / "plugin")
    estimator.train(job, schema, train, model_dir)
    result = estimator.evaluate(job, schema, evals, model_dir)
    predictions = list(
        estimator.build_estimator(job, schema, model_dir).predict(
            inputs.predict_input_fn_builder(evals, schema), yield_single_examples=False
        )
    )
    assert "plugin_w" in dict(tf.train.list_variables(model_dir))
    assert result.metrics["accuracy"] > 0.6
    assert sum(int((p["is_padding"] == 0).sum()) for p in predictions) == 1000
    # The CPU run sees global batches; strict mode's TPU simulation sees per-replica ones (8 replicas).
    batch = {ModeKeys.TRAIN: 64, ModeKeys.EVAL: 32, ModeKeys.PREDICT: 16}
    seen = {(mode, shape[0]) for mode, _, shape, _ in plugin_model.SEEN}
    assert seen == {(m, b) for m, b in batch.items()} | {(m, b // 8) for m, b in batch.items()}
    for mode, key, shape, dtype in plugin_model.SEEN:
        assert shape in ([batch[mode]], [batch[mode] // 8]), (mode, key, shape)
        assert dtype in ("float32", "int32"), (mode, key, dtype)


def test_training_writes_summaries(datasets, trained):
    events = glob.glob(os.path.join(trained["binary"], "events.out.tfevents.*"))
    tags = set()
    for path in events:
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(v.tag for v in event.summary.value)
    assert tags == {"loss", "learning_rate", "steps_per_second"}


def test_warm_start_initialises_from_a_trained_model(datasets, trained, tmp_path):
    schema, train, _ = datasets["binary"]
    source = _variables(trained["binary"])
    job = make_job(train_steps=1, save_checkpoints_steps=50).with_overrides(
        {"training.warm_start_from": trained["binary"], "training.optimizer": {"name": "sgd", "learning_rate": 1e-12}}
    )
    model_dir = str(tmp_path / "warm")
    estimator.train(job, schema, train, model_dir)
    warm = _variables(model_dir)
    for name in ("dnn/hidden_0/kernel", "dnn/logits/kernel", "dnn/embeddings/f_colour"):
        np.testing.assert_allclose(warm[name], source[name], atol=1e-6)
    cold_dir = str(tmp_path / "cold")
    estimator.train(make_job(train_steps=1, save_checkpoints_steps=50), schema, train, cold_dir)
    assert not np.allclose(_variables(cold_dir)["dnn/hidden_0/kernel"], source["dnn/hidden_0/kernel"])


def test_warm_start_from_an_incompatible_model_names_the_variable(datasets, trained, tmp_path):
    schema, train, _ = datasets["binary"]
    job = make_job(train_steps=1, save_checkpoints_steps=50).with_overrides(
        {"training.warm_start_from": trained["binary"], "model.hidden_units": [16]}
    )
    with pytest.raises(ValueError, match=r"dnn/hidden_0/kernel has shape \[\d+, 16\] here but \[\d+, 64\] there"):
        estimator.train(job, schema, train, str(tmp_path / "bad"))


def test_linear_family_trains(datasets, tmp_path):
    schema, train, evals = datasets["regression"]
    job = make_job(train_steps=200).with_overrides(
        {"model.family": "linear", "training.optimizer": {"learning_rate": 0.01, "schedule": "constant"}}
    )
    estimator.train(job, schema, train, str(tmp_path / "lin"))
    result = estimator.evaluate(job, schema, evals, str(tmp_path / "lin"))
    assert result.metrics["rmse"] < 10.0  # label std is ~25; the rule is linear plus noise 3


def test_warm_start_from_an_export_maps_embedding_rows_by_value(datasets, trained, tmp_path, caplog):
    """The new schema lists the colours in another order and adds one: each known colour's row follows its value,
    the new colour's row is fresh, the out-of-vocabulary row stays the out-of-vocabulary row."""
    schema, train, _ = datasets["binary"]
    export = export_model(make_job(), schema, trained["binary"], str(tmp_path / "export")).export_dir
    colour = schema.feature("colour")
    assert colour.vocabulary == ("red", "green", "blue")
    moved = dataclasses.replace(colour, vocabulary=("blue", "red", "violet", "green"))
    new_schema = dataclasses.replace(
        schema, features=tuple(moved if f.key == colour.key else f for f in schema.features)
    )
    job = make_job(train_steps=1, save_checkpoints_steps=50).with_overrides(
        {"training.warm_start_from": export, "training.optimizer": {"name": "sgd", "learning_rate": 1e-12}}
    )
    with caplog.at_level(logging.INFO, logger="estimator_lib.model.warm_start"):
        estimator.train(job, new_schema, train, str(tmp_path / "warm"))
    source = _variables(trained["binary"])["dnn/embeddings/f_colour"]
    warm = _variables(str(tmp_path / "warm"))["dnn/embeddings/f_colour"]
    assert warm.shape == (5, source.shape[1])
    for new_id, old_id in ((0, 2), (1, 0), (3, 1), (4, 3)):  # blue, red, green, then the out-of-vocabulary row
        np.testing.assert_allclose(warm[new_id], source[old_id], atol=1e-6)
    assert not any(np.allclose(warm[2], row, atol=1e-3) for row in source)  # violet: a fresh row
    assert "colour: 3 of 4 values keep their trained rows (3 at a new id), fresh rows for ['violet']" in caplog.text


def test_row_map_follows_values():
    old = synthetic.make_schema("binary").feature("colour")  # red, green, blue + 1 out-of-vocabulary bucket
    new = dataclasses.replace(old, vocabulary=("green", "pink", "red"), num_oov_buckets=2)
    assert warm_start.row_map(old, new) == [1, -1, 0, 3, -1]


@pytest.mark.determinism
def test_predict_loop_gives_each_batch_what_one_call_per_batch_gives():
    """Three batches of 4 rows through the loop equal the same function run on each batch alone.

    Both graphs get their rows at run time, as prediction does (a dataset's elements). With constant inputs
    grappler would fold the one-batch graph at optimisation time with its own kernels, while the loop runs
    TensorFlow's CPU kernels (oneDNN's where enabled): the comparison would then be of two kernels."""
    rng = np.random.RandomState(0)
    x = rng.normal(size=12).astype(np.float32)
    ids = rng.randint(0, 3, size=12).astype(np.int32)
    weights = rng.normal(size=(3, 5)).astype(np.float32)
    fn = lambda f: {"p": tf.nn.softmax(tf.gather(weights, f["ids"]) * f["x"][:, None]), "n": f["ids"] * 2}  # noqa: E731
    signature = {"p": (tf.float32, tf.TensorShape([5])), "n": (tf.int32, tf.TensorShape([]))}
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        rows_x = tf.compat.v1.placeholder(tf.float32, [None])
        rows_ids = tf.compat.v1.placeholder(tf.int32, [None])
        looped = session.run(predict_loop(fn, {"x": rows_x, "ids": rows_ids}, 4, signature), {rows_x: x, rows_ids: ids})
        batch_x, batch_ids = tf.compat.v1.placeholder(tf.float32, [4]), tf.compat.v1.placeholder(tf.int32, [4])
        one_batch = fn({"x": batch_x, "ids": batch_ids})
        one_by_one = [session.run(one_batch, {batch_x: x[i : i + 4], batch_ids: ids[i : i + 4]}) for i in (0, 4, 8)]
        with pytest.raises(ValueError, match=r"predict_loop takes rank-1 features \[rows\]; 'x' has shape \(12, 1\)"):
            predict_loop(fn, {"x": tf.constant(x[:, None]), "ids": tf.constant(ids)}, 4, signature)
    assert looped["p"].shape == (12, 5) and looped["n"].tolist() == (ids * 2).tolist()
    assert np.concatenate([b["p"] for b in one_by_one]).tobytes() == looped["p"].tobytes()
