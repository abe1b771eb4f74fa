"""model/model_fn.py: heads, learning-rate schedules and optimizers, and the model_fn's TPUEstimatorSpec in each
mode, called as TPUEstimator calls it on CPU, in TF1 graphs fed through placeholders (real graph inputs, so
grappler cannot constant-fold the model with other kernels): the padded rows' zero weight in the loss, the
export outputs, the CPU training loop (k steps per run, stopping at the target step), the prediction loop's
bitwise equality with one batch per run, and the `serve,tpu` graph of export API v2 built on CPU."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib.config import ConfigError, JobConfig, ModelConfig, OptimizerConfig, TPUSettings, TrainingConfig
from estimator_lib.data.example_keys import KEY_BYTES_FEATURE
from estimator_lib.data.example_keys import WIDTH as KEY_WIDTH
from estimator_lib.model import model_fn as model_fn_lib
from estimator_lib.model.inputs import PREDICT_BATCHES_PER_RUN, STEPS_PER_RUN
from estimator_lib.model.model_fn import (
    TARGET_STEP,
    LoopStopHook,
    build_model_fn,
    create_head,
    create_optimizer,
    head_signature,
    learning_rate,
)
from estimator_lib.schema import INDEX_FEATURE, PADDING_FEATURE, REGRESSION

ModeKeys = tf.estimator.ModeKeys
B = 4  # rows per batch
LOOP_OPS = {"While", "StatelessWhile", "Enter"}  # a while_loop (control flow v2, or v1)


def job(family="dnn", schedule="constant", **training) -> JobConfig:
    settings = dict(train_steps=10, save_checkpoints_steps=10, seed=3)
    settings.update(training)
    return JobConfig(
        tpu=TPUSettings(iterations_per_loop=1),
        training=TrainingConfig(
            optimizer=OptimizerConfig(name="sgd", learning_rate=0.1, schedule=schedule), **settings
        ),
        model=ModelConfig(family=family, hidden_units=(5,), embedding_dim=2, l2=0.0),
    )


def feature_placeholders(shape, padding=True, index=False):
    out = {
        "f_x_1": tf.compat.v1.placeholder(tf.float32, shape, name="x1"),
        "f_x_2": tf.compat.v1.placeholder(tf.float32, shape, name="x2"),
        "f_colour": tf.compat.v1.placeholder(tf.int32, shape, name="colour"),
    }
    if padding:
        out[PADDING_FEATURE] = tf.compat.v1.placeholder(tf.float32, shape, name="padding")
    if index:
        out[INDEX_FEATURE] = tf.compat.v1.placeholder(tf.int32, shape, name="index")
    return out


def feed_values(rows: int, seed: int = 0, padding=None):
    rng = np.random.RandomState(seed)
    values = {
        "f_x_1": rng.normal(2.0, 3.0, rows).astype(np.float32),
        "f_x_2": rng.normal(-1.0, 0.5, rows).astype(np.float32),
        "f_colour": rng.randint(0, 4, rows).astype(np.int32),
        PADDING_FEATURE: np.zeros(rows, np.float32) if padding is None else np.float32(padding),
        INDEX_FEATURE: np.arange(rows, dtype=np.int32),
    }
    return values


def feed(placeholders, values):
    return {placeholders[k]: values[k] for k in placeholders}


def call(fn, mode, features, labels, model_dir, **params):
    config = tf.compat.v1.estimator.tpu.RunConfig(model_dir=model_dir, save_checkpoints_steps=10)
    return fn(features, labels, mode, {"batch_size": B, "use_tpu": False, **params}, config)


def labelled_spec(schema, warm_job, mode, model_dir, shape=(B,), padding=True, **params):
    """In the current graph: (features, labels, spec): feature placeholders of `shape` (with the padding marker
    when `padding`), label placeholders (float for regression, int otherwise), `warm_job`'s model_fn's spec."""
    features = feature_placeholders(list(shape), padding=padding)
    labels = tf.compat.v1.placeholder(tf.float32 if schema.label.task == REGRESSION else tf.int32, list(shape))
    return features, labels, call(build_model_fn(schema, warm_job), mode, features, labels, model_dir, **params)


# -- heads ---------------------------------------------------------------------------------------------------
def run(fetches, feed_dict=None):
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        return session.run(fetches, feed_dict)


def test_binary_head():
    logits = np.float32([[2.0], [-1.0], [0.0]])
    labels = np.int32([1, 1, 0])
    with tf.Graph().as_default():
        head = create_head(tf.constant(logits), tf.constant(labels), synthetic.make_schema("binary"))
        loss, p = run([head.per_example_loss, head.predictions])
    sigmoid = 1 / (1 + np.exp(-logits[:, 0]))
    np.testing.assert_allclose(p["probabilities"], np.stack([1 - sigmoid, sigmoid], axis=1), rtol=1e-6)
    assert p["class_ids"].tolist() == [1, 0, 0]  # p = 0.5 is not above 0.5
    np.testing.assert_allclose(loss, -np.log([sigmoid[0], sigmoid[1], 1 - sigmoid[2]]), rtol=1e-5)
    assert sorted(p) == ["class_ids", "logits", "probabilities"]


def test_multiclass_head():
    logits = np.float32([[1.0, 3.0, 0.0], [0.5, 0.0, 2.0]])
    with tf.Graph().as_default():
        head = create_head(tf.constant(logits), tf.constant([1, 0]), synthetic.make_schema("multiclass"))
        loss, p = run([head.per_example_loss, head.predictions])
    softmax = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(p["probabilities"], softmax, rtol=1e-6)
    assert p["class_ids"].tolist() == [1, 2] and p["class_ids"].dtype == np.int32
    np.testing.assert_allclose(loss, -np.log([softmax[0, 1], softmax[1, 0]]), rtol=1e-5)


def test_regression_head_learns_the_standardised_label():
    schema = synthetic.make_schema("regression")  # label mean 50, std 25
    with tf.Graph().as_default():
        head = create_head(tf.constant([[0.4], [-2.0]]), tf.constant([60.0, 0.0]), schema)
        loss, p = run([head.per_example_loss, head.predictions])
    assert list(p) == ["predictions"]
    np.testing.assert_allclose(p["predictions"], [60.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(loss, [0.0, 0.0], atol=1e-6)
    with tf.Graph().as_default():
        assert create_head(tf.constant([[0.0]]), None, schema).per_example_loss is None


def test_head_signature_per_task():
    assert head_signature(synthetic.make_schema("regression")) == {"predictions": (tf.float32, tf.TensorShape([]))}
    multiclass = head_signature(synthetic.make_schema("multiclass"))
    assert multiclass == {
        "class_ids": (tf.int32, tf.TensorShape([])),
        "probabilities": (tf.float32, tf.TensorShape([3])),
        "logits": (tf.float32, tf.TensorShape([3])),
    }
    assert head_signature(synthetic.make_schema("binary"))["logits"] == (tf.float32, tf.TensorShape([1]))


# -- learning rate and optimizer -----------------------------------------------------------------------------
def rate(step, train_steps=10, **opt):
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        lr = learning_rate(OptimizerConfig(learning_rate=0.1, **opt), train_steps, global_step)
        with tf.compat.v1.Session() as session:
            session.run(global_step.assign(step))
            return session.run(lr)


def test_learning_rate_schedules():
    assert rate(7, schedule="constant") == pytest.approx(0.1)
    assert rate(5, schedule="cosine_decay") == pytest.approx(0.05)  # half-way down the budget of 10
    assert rate(4, schedule="exponential_decay", decay_rate=0.5, decay_steps=2) == pytest.approx(0.025)
    assert rate(5, schedule="linear_decay", end_learning_rate=0.02) == pytest.approx(0.06)
    assert rate(1, schedule="constant", warmup_steps=4) == pytest.approx(0.05)  # (step + 1) / warmup
    assert rate(9, schedule="constant", warmup_steps=4) == pytest.approx(0.1)


def test_a_decaying_schedule_needs_a_budget():
    assert rate(3, train_steps=None, schedule="constant") == pytest.approx(0.1)
    with pytest.raises(ConfigError) as e:
        rate(0, train_steps=None, schedule="cosine_decay")
    assert str(e.value).startswith("optimizer.schedule='cosine_decay' needs the step budget")
    assert str(e.value).endswith("or set training.train_steps or optimizer.decay_steps")
    assert rate(5, train_steps=None, schedule="cosine_decay", decay_steps=10) == pytest.approx(0.05)


@pytest.mark.parametrize(
    "name, cls",
    [
        ("sgd", tf.compat.v1.train.GradientDescentOptimizer),
        ("momentum", tf.compat.v1.train.MomentumOptimizer),
        ("adam", tf.compat.v1.train.AdamOptimizer),
        ("adagrad", tf.compat.v1.train.AdagradOptimizer),
        ("rmsprop", tf.compat.v1.train.RMSPropOptimizer),
    ],
)
def test_optimizers_and_cross_shard_wrapping_on_tpu(name, cls):
    with tf.Graph().as_default():
        assert type(create_optimizer(OptimizerConfig(name=name), tf.constant(0.1), use_tpu=False)) is cls
        wrapped = create_optimizer(OptimizerConfig(name=name), tf.constant(0.1), use_tpu=True)
        assert isinstance(wrapped, tf.compat.v1.tpu.CrossShardOptimizer) and type(wrapped._opt) is cls


# -- building the model_fn -----------------------------------------------------------------------------------
def test_unknown_model_feature_fails_at_construction():
    bad = job().with_overrides({"model.features": ["x 1", "weight"]})
    with pytest.raises(ConfigError) as e:
        build_model_fn(synthetic.make_schema("binary"), bad)
    assert str(e.value).startswith("model.features: unknown feature 'weight'; the schema has:")
    assert str(e.value).endswith("list original column names from the schema")


# -- TRAIN ---------------------------------------------------------------------------------------------------
def test_train_spec_steps_once_without_a_host_call(tmp_path):
    """No host_call: Estimator writes the loss summary and the progress hook the learning rate (one event file,
    one loss tag; tests/lib/model/test_hooks.py)."""
    schema = synthetic.make_schema("binary")
    with tf.Graph().as_default():
        features, labels, spec = labelled_spec(schema, job(), ModeKeys.TRAIN, str(tmp_path), padding=False)
        assert spec.mode == ModeKeys.TRAIN and spec.scaffold_fn is None and spec.eval_metrics is None
        assert spec.host_call is None
        step = tf.compat.v1.train.get_global_step()
        feed_dict = {**feed(features, feed_values(B)), labels: [1, 0, 1, 1]}
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            _, loss = session.run([spec.train_op, spec.loss], feed_dict)
            assert session.run(step) == 1 and np.isfinite(loss)


def one_step(tmp_path, warm_job, padding=None, label_values=(0, 1, 2, 1)):
    """(loss, weighted mean of the per-example losses, regularisation, {variable: (before, after)}) of one step."""
    schema = synthetic.make_schema("multiclass")
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(2)
        features, labels, spec = labelled_spec(
            schema, warm_job, ModeKeys.TRAIN, str(tmp_path), padding=padding is not None
        )
        variables = tf.compat.v1.trainable_variables()
        feed_dict = {**feed(features, feed_values(B, seed=4, padding=padding)), labels: list(label_values)}
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            before = session.run(variables)
            regularisation = session.run(tf.compat.v1.losses.get_regularization_loss())
            loss = session.run(spec.loss, feed_dict)
            session.run(spec.train_op, feed_dict)
            after = session.run(variables)
    return loss, regularisation, [(b, a) for b, a in zip(before, after)]


def test_train_loss_adds_the_l2_penalty(tmp_path):
    plain = job()
    with_l2 = dataclasses.replace(plain, model=dataclasses.replace(plain.model, l2=0.5))
    loss, regularisation, _ = one_step(tmp_path / "a", plain)
    loss_l2, regularisation_l2, _ = one_step(tmp_path / "b", with_l2)
    assert regularisation == 0.0 and regularisation_l2 > 0.0
    assert loss_l2 == pytest.approx(loss + regularisation_l2, rel=1e-5)  # same seed, same initial variables


def test_train_loss_ignores_padded_rows(tmp_path):
    loss_all, _, _ = one_step(tmp_path / "a", job(), padding=[0, 0, 0, 0])
    loss_padded, _, _ = one_step(tmp_path / "b", job(), padding=[0, 0, 1, 1])
    other_labels, _, _ = one_step(tmp_path / "c", job(), padding=[0, 0, 1, 1], label_values=(0, 1, 0, 0))
    assert loss_padded != pytest.approx(loss_all)
    assert other_labels == loss_padded  # a padded row's label cannot move the training loss


def test_gradients_are_clipped_to_the_global_norm(tmp_path):
    clipped = job().with_overrides(
        {
            "training.optimizer": {
                "name": "sgd",
                "learning_rate": 0.1,
                "schedule": "constant",
                "clip_gradient_norm": 1e-3,
            }
        }
    )
    _, _, moves = one_step(tmp_path, clipped)
    norm = np.sqrt(sum(np.sum((a.astype(np.float64) - b) ** 2) for b, a in moves))
    assert norm == pytest.approx(0.1 * 1e-3, rel=1e-3)  # SGD moves by lr * the clipped gradient
    _, _, free = one_step(tmp_path / "free", job())
    assert np.sqrt(sum(np.sum((a.astype(np.float64) - b) ** 2) for b, a in free)) > 10 * norm


def cpu_loop_train_spec(model_dir: str, k: int, target: int):
    """In the current graph: a linear regression model's TRAIN spec running `k` steps per session run up to step
    `target`, and a feed of `k` batches of B rows labelled 60."""
    schema = synthetic.make_schema("regression")
    features, labels, spec = labelled_spec(
        schema,
        job(family="linear"),
        ModeKeys.TRAIN,
        model_dir,
        (k, B),
        False,
        **{STEPS_PER_RUN: k, TARGET_STEP: target},
    )
    values = {name: np.stack([v] * k) for name, v in feed_values(B).items()}
    return spec, {**feed(features, values), labels: np.full([k, B], 60.0, np.float32)}


def test_loop_stop_hook_ends_the_session_at_the_target(tmp_path):
    with tf.Graph().as_default():
        spec, feed_dict = cpu_loop_train_spec(str(tmp_path), k=3, target=7)
        stop_hook = spec.training_hooks[1]
        runs = 0
        with tf.compat.v1.train.MonitoredSession(hooks=[stop_hook]) as session:
            while not session.should_stop():
                session.run(spec.train_op, feed_dict)
                runs += 1
            step = session.run_step_fn(
                lambda step_context: step_context.session.run(tf.compat.v1.train.get_global_step())
            )
    assert (runs, step) == (3, 7)  # 3 + 3 + 1 steps: no extra run that trains nothing


def test_cpu_train_loop_runs_k_steps_per_run_and_stops_at_the_target(tmp_path):
    with tf.Graph().as_default():
        spec, feed_dict = cpu_loop_train_spec(str(tmp_path), k=3, target=5)
        checkpoint_hook, stop_hook = spec.training_hooks
        assert isinstance(stop_hook, LoopStopHook) and stop_hook._target_step == 5
        assert checkpoint_hook._timer._every_steps == 10 and checkpoint_hook._steps_per_run == 3
        step = tf.compat.v1.train.get_global_step()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            steps = []
            for _ in range(3):
                session.run(spec.train_op, feed_dict)
                steps.append(int(session.run(step)))
    assert steps == [3, 5, 5]  # never past the train() call's max_steps


# -- EVAL ----------------------------------------------------------------------------------------------------
def test_eval_loss_gives_padded_rows_zero_weight(tmp_path):
    schema = synthetic.make_schema("binary")
    with tf.Graph().as_default():
        features, labels, spec = labelled_spec(schema, job(), ModeKeys.EVAL, str(tmp_path))
        metric_fn, (m_labels, logits, per_example, weights) = spec.eval_metrics
        assert m_labels is labels and [t.shape.as_list() for t in (logits, per_example, weights)] == [[B, 1], [B], [B]]
        values = feed_values(B, padding=[0, 0, 1, 1])
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())

            def run_with(y, v=values):
                return session.run([spec.loss, per_example, weights], {**feed(features, v), labels: y})

            loss, pel, w = run_with([1, 0, 1, 1])
            other_padding_labels, _, _ = run_with([1, 0, 0, 0])
            all_padding, _, _ = run_with([1, 0, 1, 1], dict(values, **{PADDING_FEATURE: np.ones(B, np.float32)}))
    assert w.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert loss == pytest.approx((pel[0] + pel[1]) / 2, rel=1e-6)
    assert other_padding_labels == loss  # a padded row's label cannot move the loss
    assert all_padding == 0.0  # no real row: the sum of weights is taken as 1, not divided by 0


def test_eval_without_padding_marker_weights_every_row(tmp_path):
    schema = synthetic.make_schema("regression")
    with tf.Graph().as_default():
        features, labels, spec = labelled_spec(schema, job(), ModeKeys.EVAL, str(tmp_path), padding=False)
        weights = spec.eval_metrics[1][3]
        loss, pel, w = run(
            [spec.loss, spec.eval_metrics[1][2], weights], {**feed(features, feed_values(B)), labels: [1, 2, 3, 4]}
        )
    assert w.tolist() == [1.0] * B and loss == pytest.approx(float(np.mean(pel)), rel=1e-6)


# -- PREDICT -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "task, kind", [("binary", "classification"), ("multiclass", "classification"), ("regression", "regression")]
)
def test_predict_spec_passes_markers_and_has_export_outputs(task, kind, tmp_path):
    schema = synthetic.make_schema(task)
    with tf.Graph().as_default():
        features = feature_placeholders([B], index=True)
        features[KEY_BYTES_FEATURE] = tf.compat.v1.placeholder(tf.int32, [B, KEY_WIDTH])
        spec = call(build_model_fn(schema, job()), ModeKeys.PREDICT, features, None, str(tmp_path))
        outputs = spec.export_outputs
        head_keys = ["predictions"] if task == "regression" else ["class_ids", "logits", "probabilities"]
        assert sorted(spec.predictions) == sorted(head_keys + [PADDING_FEATURE, INDEX_FEATURE, KEY_BYTES_FEATURE])
        assert sorted(outputs) == sorted(["predict", kind, "serving_default"])
        assert outputs["serving_default"] is outputs["predict"]
        assert sorted(outputs["predict"].outputs) == sorted(head_keys)
        if kind == "classification":
            assert outputs[kind].scores.shape.as_list() == [B, 2 if task == "binary" else 3]
        else:
            assert outputs[kind].value.shape.as_list() == [B]
        key_values = np.arange(B * KEY_WIDTH, dtype=np.int32).reshape(B, KEY_WIDTH)
        values = feed_values(B, padding=[0, 0, 0, 1])
        got = run(
            spec.predictions,
            {
                **feed({k: v for k, v in features.items() if k != KEY_BYTES_FEATURE}, values),
                features[KEY_BYTES_FEATURE]: key_values,
            },
        )
    assert got[PADDING_FEATURE].tolist() == [0, 0, 0, 1] and got[INDEX_FEATURE].tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(got[KEY_BYTES_FEATURE], key_values)


def loop_and_single_batch_predictions(task: str, m: int, model_dir: str):
    """The same variables predicting m batches: once in the CPU loop (one session.run), once a batch per run."""
    schema = synthetic.make_schema(task)
    fn = build_model_fn(schema, job())
    values = feed_values(m * B, seed=5, padding=[0] * (m * B - 1) + [1])
    with tf.Graph().as_default() as graph:
        tf.compat.v1.set_random_seed(1)
        single_in = feature_placeholders([B], index=True)
        single = call(fn, ModeKeys.PREDICT, single_in, None, model_dir)
        assert not LOOP_OPS & {op.type for op in graph.get_operations()}
        loop_in = feature_placeholders([None], index=True)  # m is known at run time only
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True):
            looped = call(fn, ModeKeys.PREDICT, loop_in, None, model_dir, **{PREDICT_BATCHES_PER_RUN: m})
        assert LOOP_OPS & {op.type for op in graph.get_operations()}  # the loop path: a while_loop
        assert len(tf.compat.v1.global_variables()) == len(tf.compat.v1.trainable_variables())  # no second copy
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            loop_out = session.run(looped.predictions, feed(loop_in, values))
            batches = [
                session.run(single.predictions, feed(single_in, {k: v[i * B : (i + 1) * B] for k, v in values.items()}))
                for i in range(m)
            ]
    return loop_out, {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_predict_loop_equals_one_batch_per_run_bit_for_bit(task, tmp_path):
    loop_out, one_by_one = loop_and_single_batch_predictions(task, m=3, model_dir=str(tmp_path))
    assert sorted(loop_out) == sorted(one_by_one)
    for key, value in one_by_one.items():
        assert loop_out[key].shape == value.shape and loop_out[key].dtype == value.dtype, key
        assert loop_out[key].tobytes() == value.tobytes(), key


ONEDNN_CHECK = """
import sys, tempfile
sys.path[:0] = [{repo!r}, {tests!r}, {here!r}]
import estimator_lib, test_model_fn
assert estimator_lib.__file__.startswith({repo!r}), estimator_lib.__file__
with tempfile.TemporaryDirectory() as d:
    loop_out, one = test_model_fn.loop_and_single_batch_predictions("multiclass", 3, d)
print(all(loop_out[k].tobytes() == v.tobytes() for k, v in one.items()))
"""


@pytest.mark.parametrize("onednn", ["0", "1"])
def test_predict_loop_equality_holds_with_onednn_on_and_off(onednn):
    """The bitwise claim under both CPU kernel settings (oneDNN is read once, at TensorFlow's import)."""
    here = os.path.dirname(os.path.abspath(__file__))
    tests = os.path.dirname(os.path.dirname(here))
    code = ONEDNN_CHECK.format(repo=os.path.dirname(tests), tests=tests, here=here)
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_predict_loop_is_not_used_on_tpu_or_for_one_batch(tmp_path):
    schema = synthetic.make_schema("binary")
    fn = build_model_fn(schema, job())
    for params in ({PREDICT_BATCHES_PER_RUN: 1}, {PREDICT_BATCHES_PER_RUN: 3, "use_tpu": True, "context": None}):
        assert not model_fn_lib._predicts_in_loop(ModeKeys.PREDICT, {"use_tpu": False, **params})
    assert model_fn_lib._predicts_in_loop(ModeKeys.PREDICT, {"use_tpu": False, PREDICT_BATCHES_PER_RUN: 2})
    assert not model_fn_lib._predicts_in_loop(ModeKeys.EVAL, {"use_tpu": False, PREDICT_BATCHES_PER_RUN: 2})
    with tf.Graph().as_default() as graph:
        call(fn, ModeKeys.PREDICT, feature_placeholders([B]), None, str(tmp_path), **{PREDICT_BATCHES_PER_RUN: 1})
        assert not LOOP_OPS & {op.type for op in graph.get_operations()}


# -- the serve,tpu meta graph (export API v2) ----------------------------------------------------------------
def test_export_tpu_graph_wraps_the_model_in_a_tpu_partitioned_call(tmp_path):
    schema = synthetic.make_schema("multiclass")
    fn = build_model_fn(schema, job())
    with tf.Graph().as_default() as graph:
        features = feature_placeholders([None], padding=False)
        config = tf.compat.v1.estimator.tpu.RunConfig(model_dir=str(tmp_path))
        spec = fn(features, None, ModeKeys.PREDICT, {"use_tpu": True}, config)  # export: no batch_size, no context
        op_types = {op.type for op in graph.get_operations()}
        assert "TPUPartitionedCall" in op_types
        assert sorted(spec.predictions) == ["class_ids", "logits", "probabilities"]
        assert sorted(spec.export_outputs) == ["classification", "predict", "serving_default"]
        # every prediction comes out of the TPU computation
        call_ops = [op for op in graph.get_operations() if op.type == "TPUPartitionedCall"]
        assert all(any(a in call_ops for a in _ancestor_ops(t.op)) for t in spec.predictions.values())


def _ancestor_ops(op):
    seen, stack = {op}, [op]
    while stack:
        for t in stack.pop().inputs:
            if t.op not in seen:
                seen.add(t.op)
                stack.append(t.op)
    return seen


def test_export_cpu_graph_has_no_tpu_call(tmp_path):
    fn = build_model_fn(synthetic.make_schema("regression"), job())
    with tf.Graph().as_default() as graph:
        features = feature_placeholders([None], padding=False)
        config = tf.compat.v1.estimator.tpu.RunConfig(model_dir=str(tmp_path))
        spec = fn(features, None, ModeKeys.PREDICT, {"use_tpu": False}, config)
        assert "TPUPartitionedCall" not in {op.type for op in graph.get_operations()}
        assert list(spec.predictions) == ["predictions"]


# -- warm start ----------------------------------------------------------------------------------------------
def save_cold_model(schema, model_dir: str) -> None:
    """A real checkpoint of the model's variables (a cold TRAIN graph, initialised, not trained)."""
    with tf.Graph().as_default():
        features, labels = feature_placeholders([B], padding=False), tf.compat.v1.placeholder(tf.int32, [B])
        call(build_model_fn(schema, job()), ModeKeys.TRAIN, features, labels, model_dir)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(session, os.path.join(model_dir, "model.ckpt"), global_step=0)


def predict_spec(schema, warm_job, model_dir):
    with tf.Graph().as_default():
        return call(build_model_fn(schema, warm_job), ModeKeys.PREDICT, feature_placeholders([B]), None, model_dir)


def test_train_spec_warm_starts_from_the_source(tmp_path):
    schema = synthetic.make_schema("binary")
    source = str(tmp_path / "source")
    save_cold_model(schema, source)
    warm = job().with_overrides({"training.warm_start_from": source})
    with tf.Graph().as_default():
        _, _, spec = labelled_spec(schema, warm, ModeKeys.TRAIN, str(tmp_path / "model"), padding=False)
        assert spec.scaffold_fn is not None
        spec.scaffold_fn()  # init_from_checkpoint: the initialisers now read the source
        kernel = next(v for v in tf.compat.v1.global_variables() if v.op.name == "dnn/hidden_0/kernel")
        value = run(kernel)
    np.testing.assert_array_equal(value, tf.train.load_variable(source, "dnn/hidden_0/kernel"))


def test_predict_does_not_need_the_warm_start_source(tmp_path):
    schema = synthetic.make_schema("binary")
    source = str(tmp_path / "source")
    save_cold_model(schema, source)
    warm = job().with_overrides({"training.warm_start_from": source})
    predict_spec(schema, warm, str(tmp_path / "model"))  # while the source exists
    shutil.rmtree(source)  # e.g. the published model it started from was replaced
    spec = predict_spec(schema, warm, str(tmp_path / "model"))
    assert sorted(spec.predictions) == ["class_ids", "is_padding", "logits", "probabilities"]
