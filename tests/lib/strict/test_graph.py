"""strict/graph.py, each check on its own: a tiny hand-written model_fn is built with `build_mode_graph` as a
TPU would call it (the global step first, per-replica batch, use_tpu, a TPU context, a shard context of 8
replicas), and every check returns exactly its finding (class and message) for the mistake and nothing for the
correct form. (check_model, which gathers these checks into one report, is tested in test_strict.py.)"""

from __future__ import annotations

import functools
import os

import pytest
import tensorflow as tf
from tensorflow.python.tpu import tpu_function, tpu_optimizer

from estimator_lib.strict import graph
from estimator_lib.strict.findings import DIFFERS, FAILS
from estimator_lib.strict.inputs import InputInfo, SimulatedTPUContext, TPUTarget

ModeKeys = tf.estimator.ModeKeys
TPUEstimatorSpec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec
TARGET = TPUTarget(8, 1, {ModeKeys.TRAIN: 2, ModeKeys.EVAL: 3, ModeKeys.PREDICT: 4}, seed=11)
INFO = InputInfo(
    {"x": tf.TensorSpec([None], tf.float32), "n": tf.TensorSpec([None, 2], tf.int32)},
    tf.TensorSpec([None], tf.float32),
    None,
)
SEEN = {}


def optimizer(cross_shard=True):
    sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    return tf.compat.v1.tpu.CrossShardOptimizer(sgd) if cross_shard else sgd


def host_fn(loss):
    return [tf.reduce_mean(loss)]


def metric_fn(labels, per_example_loss):
    return {"mean_loss": tf.compat.v1.metrics.mean(per_example_loss)}


def model_fn_builder(predictions=None, train=None, host_call=None, eval_metrics=None, extra=None):
    """A linear model on features["x"]; each keyword replaces one part with a (possibly wrong) builder."""

    def model_fn(features, labels, mode, params, config):
        SEEN.update(params=params, config=config, shards=tpu_function.get_tpu_context().number_of_shards)
        w = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.ones_initializer())
        out = features["x"] * w
        if extra is not None:
            out = extra(out)
        if mode == ModeKeys.PREDICT:
            return TPUEstimatorSpec(mode, predictions=(predictions or (lambda o: {"y": o}))(out))
        per_example = tf.square(out - labels)
        loss = tf.reduce_mean(per_example)
        if mode == ModeKeys.EVAL:
            call = (eval_metrics or (lambda y, p: (metric_fn, [y, p])))(labels, per_example)
            return TPUEstimatorSpec(mode, loss=loss, eval_metrics=call)
        train_op = (
            train or (lambda loss_: optimizer().minimize(loss_, tf.compat.v1.train.get_or_create_global_step()))
        )(loss)
        call = (host_call or (lambda loss_: (host_fn, [tf.reshape(loss_, [1])])))(loss)
        return TPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=call)

    return model_fn


def messages(findings, severity=FAILS):
    """The findings' messages, after checking they are all of `severity`."""
    assert [f.severity for f in findings] == [severity] * len(findings)
    return [f.message for f in findings]


def build(mode, tmp_path, **parts) -> graph.ModeGraph:
    info = INFO if mode != ModeKeys.PREDICT else InputInfo(INFO.features, None, None)
    return graph.build_mode_graph(model_fn_builder(**parts), mode, info, TARGET, str(tmp_path))


# -- building the graph as a TPU would -----------------------------------------------------------------------
def test_placeholders_get_the_replica_batch():
    with tf.Graph().as_default():
        features, labels = graph.placeholders(INFO, 5)
        assert {k: t.shape.as_list() for k, t in features.items()} == {"x": [5], "n": [5, 2]}
        assert labels.shape.as_list() == [5] and labels.op.name == "label"
        static = InputInfo({"x": tf.TensorSpec([7], tf.float32)}, {"a": tf.TensorSpec([None], tf.int32)}, None)
        features, labels = graph.placeholders(static, 5)
        assert features["x"].shape.as_list() == [7]  # a static size is kept
        assert list(labels) == ["a"] and labels["a"].op.name == "label_a" and labels["a"].dtype == tf.int32
        assert graph.placeholders(InputInfo({"x": tf.TensorSpec([], tf.float32)}, None, None), 5)[1] is None


def test_model_fn_is_called_with_tpu_params_config_and_shards(tmp_path):
    g = build(ModeKeys.EVAL, tmp_path)
    params = SEEN["params"]
    assert params["batch_size"] == 3 and params["use_tpu"] is True
    assert isinstance(params["context"], SimulatedTPUContext) and params["context"].num_replicas == 8
    assert SEEN["config"].model_dir == str(tmp_path) and SEEN["config"].tf_random_seed == 11
    assert SEEN["shards"] == 8
    assert g.mode == ModeKeys.EVAL and g.graph.seed == 11
    assert [t.op.name for t in g.inputs] == ["n", "x", "label"]
    assert all(t.graph is g.graph for t in g.inputs)


def test_cross_shard_optimizer_is_restored_after_the_build(tmp_path):
    before = tpu_optimizer.CrossShardOptimizer.compute_gradients, tpu_optimizer.CrossShardOptimizer.apply_gradients
    g = build(ModeKeys.TRAIN, tmp_path)
    after = tpu_optimizer.CrossShardOptimizer.compute_gradients, tpu_optimizer.CrossShardOptimizer.apply_gradients
    assert before == after
    assert len(g.cross_shard.computed) == 1 and [v.op.name for _, v in g.cross_shard.applied] == ["w"]


def test_temporary_model_dir():
    with graph.temporary_model_dir() as path:
        assert os.path.basename(path).startswith("strict-model-dir-") and os.path.isdir(path)
    assert not os.path.exists(path)


# -- strings and shapes inside the TPU computation -----------------------------------------------------------
def test_string_tensors_are_named(tmp_path):
    clean = build(ModeKeys.PREDICT, tmp_path)
    assert graph.check_graph_strings(clean, "fn") == []
    g = build(ModeKeys.PREDICT, tmp_path, extra=lambda o: tf.strings.to_number(tf.strings.as_string(o)))
    (finding,) = graph.check_graph_strings(g, "fn")
    assert (finding.rule, finding.where, finding.severity) == ("dtype", "AsString", FAILS)
    message = finding.message
    assert message.startswith("infer model_fn fn: op 'AsString' (AsString) makes string tensor 'AsString:0' inside")
    assert message.endswith("and summaries through host_call")


def test_dynamic_shapes_are_named(tmp_path):
    assert graph.check_graph_shapes(build(ModeKeys.TRAIN, tmp_path), "fn") == []
    g = build(ModeKeys.PREDICT, tmp_path, extra=lambda o: o + tf.reduce_sum(tf.boolean_mask(o, o > 0)))
    found = messages(graph.check_graph_shapes(g, "fn"))
    assert found and all("of dynamic shape" in m for m in found)
    assert any("boolean_mask" in m and "shape (None,)" in m for m in found)
    assert found[0].endswith("and constant sizes in reshapes)")


def test_predictions_keep_a_static_batch(tmp_path):
    assert graph.check_predictions(build(ModeKeys.PREDICT, tmp_path), "fn", 4) == []
    g = build(ModeKeys.PREDICT, tmp_path, predictions=lambda o: {"sum": tf.reduce_sum(o), "y": o})
    assert messages(graph.check_predictions(g, "fn", 4)) == [
        "predict model_fn fn: predictions['sum'] 'Sum:0' has shape (), expected static [4, ...]: TPU predictions "
        "are outfed per row. Fix: keep the batch dimension"
    ]
    assert graph.check_predictions(g, "fn", 4)[0].name == "static-shape:predictions/sum"
    assert "'y'" in messages(graph.check_predictions(g, "fn", 5))[1]  # batch 4 where 5 was expected
    g = build(ModeKeys.PREDICT, tmp_path, predictions=lambda o: o)
    assert messages(graph.check_predictions(g, "fn", 4)) == [
        "predict model_fn fn: TPUEstimatorSpec.predictions is SymbolicTensor; a TPU needs a dict of batch-major "
        "tensors. Fix: return {'name': tensor [batch, ...]}"
    ]


# -- host_call and eval_metrics ------------------------------------------------------------------------------
def test_outfeed_tensors_need_rank_static_shape_and_batch(tmp_path):
    g = build(ModeKeys.TRAIN, tmp_path)
    with g.graph.as_default():
        scalar, batch = tf.constant(1.0, name="scalar"), tf.zeros([3], name="batch")
        dynamic = tf.compat.v1.placeholder(tf.float32, [None], name="dynamic")
        wide = tf.zeros([2, 3], name="wide")
    assert graph.check_outfeed(g, "host_call", g.spec.host_call, None) == []
    (finding,) = graph.check_outfeed(g, "host_call", (host_fn, [scalar]), None)
    assert (finding.name, finding.severity) == ("outfeed:host_call/loss", FAILS)
    message = finding.message
    assert message.startswith("train host_call argument 'loss' (tensor 'scalar:0', shape ()) is a scalar")
    assert "e.g. tf.reshape(x, [1]) for a host_call value" in message
    (message,) = messages(graph.check_outfeed(g, "eval_metrics", (metric_fn, {"labels": dynamic}), 3))
    assert message.startswith("train eval_metrics argument 'labels' (tensor 'dynamic:0', shape (None,)) has a")
    (message,) = messages(graph.check_outfeed(g, "eval_metrics", (metric_fn, [batch, wide]), 3))
    assert message.startswith("train eval_metrics argument 'per_example_loss' (tensor 'wide:0', shape (2, 3)) is")
    assert "its first dimension must be the replica batch 3" in message


def test_captured_graph_objects_through_closure_globals_and_partial():
    with tf.Graph().as_default():
        captured = tf.constant([1.0], name="captured")

        def closes_over(labels):
            return {"m": tf.compat.v1.metrics.mean(captured)}

        assert graph.captured_graph_objects(closes_over) == [("captured", captured)]
        partial = functools.partial(metric_fn, per_example_loss=[captured])
        assert graph.captured_graph_objects(partial) == [("partial argument 'per_example_loss'", captured)]
        assert graph.captured_graph_objects(functools.partial(host_fn, captured)) == [("partial argument #0", captured)]
        SEEN["global_tensor"] = captured
        assert graph.captured_graph_objects(uses_a_global) == [("SEEN", captured)]
        SEEN.pop("global_tensor")
        assert graph.captured_graph_objects(metric_fn) == [] and graph.captured_graph_objects(len) == []


def uses_a_global(labels):
    return [SEEN["global_tensor"]]


def test_host_fn_must_take_its_tensors_as_arguments(tmp_path):
    g = build(ModeKeys.EVAL, tmp_path)
    assert graph.check_host_fn(g, "eval_metrics", g.spec.eval_metrics, 8) == []
    with g.graph.as_default():
        logits = tf.identity(g.inputs[0], name="model_logits")

    def closure_metric_fn(labels, per_example_loss):
        return {"mean": tf.compat.v1.metrics.mean(logits)}

    (message,) = messages(graph.check_host_fn(g, "eval_metrics", (closure_metric_fn, g.spec.eval_metrics[1]), 8))
    assert "closure_metric_fn closes over model-graph tensor 'model_logits:0' (as 'logits')" in message
    assert message.endswith(
        "Fix: add the tensor to eval_metrics[1] and take it as an argument of " + closure_metric_fn.__qualname__
    )

    def wrong_rank(labels, per_example_loss):
        return {"m": tf.compat.v1.metrics.mean(tf.reshape(labels, [3]))}  # 24 host rows, not 3

    model_graph = g.graph

    def builds_in_the_model_graph(labels, per_example_loss):
        with model_graph.as_default():
            return {"m": tf.constant([1.0], name="stray")}

    (message,) = messages(
        graph.check_host_fn(g, "eval_metrics", (builds_in_the_model_graph, g.spec.eval_metrics[1]), 8)
    )
    assert "fails on the host when given fresh tensors: it builds 'stray:0' in the model graph" in message

    (message,) = messages(graph.check_host_fn(g, "eval_metrics", (wrong_rank, g.spec.eval_metrics[1]), 8))
    assert message.startswith(
        f"eval eval_metrics function {wrong_rank.__qualname__} fails on the host when given fresh"
    )
    assert "(ValueError: " in message


def test_host_placeholders_concatenate_replicas():
    with tf.Graph().as_default():
        call = (host_fn, {"a": tf.zeros([2, 5]), "b": tf.zeros([1])})
        made = graph._host_placeholders(call, 8)
        assert {k: t.shape.as_list() for k, t in made.items()} == {"a": [16, 5], "b": [8]}


# -- cross-replica gradients ---------------------------------------------------------------------------------
def test_cross_shard_optimizer_passes(tmp_path):
    assert graph.check_cross_shard(build(ModeKeys.TRAIN, tmp_path), "fn", 8) == []


def test_a_plain_optimizer_fails(tmp_path):
    g = build(ModeKeys.TRAIN, tmp_path, train=lambda loss_: optimizer(False).minimize(loss_))
    (finding,) = graph.check_cross_shard(g, "fn", 8)
    assert (finding.name, finding.severity) == ("cross-shard:w", FAILS)
    assert finding.message.startswith("train model_fn fn: variable 'w' is updated by ")
    assert "with a gradient not summed across TPU replicas (no CrossReplicaSum)" in finding.message


def outside(loss):
    variables = tf.compat.v1.trainable_variables()
    return optimizer().apply_gradients(zip(tf.gradients(loss, variables), variables))


def test_gradients_computed_outside_the_cross_shard_optimizer_are_one_difference(tmp_path):
    (finding,) = graph.check_cross_shard(build(ModeKeys.TRAIN, tmp_path, train=outside), "fn", 8)
    assert (finding.rule, finding.where, finding.severity) == ("cross-shard", "outside", DIFFERS)
    assert finding.message.startswith(
        "train model_fn fn: 1 of the 1 gradients passed to CrossShardOptimizer.apply_gradients (by outside; "
        "optimizer GradientDescentOptimizer; e.g. 'w') were not computed by CrossShardOptimizer.compute_gradients"
    )
    assert "on 8 replicas the update applies the SUM of the shards' gradients, not their mean" in finding.message
    assert "with SGD or momentum each step is 8 times too large" in finding.message


def test_the_global_step_exists_before_the_model_fn_runs(tmp_path):
    def schedule(loss):
        step = tf.compat.v1.train.get_global_step()  # None unless created first, as TPUEstimator does
        learning_rate = tf.compat.v1.train.polynomial_decay(0.1, step, 100, end_learning_rate=0.0)
        sgd = tf.compat.v1.tpu.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(learning_rate))
        return sgd.minimize(loss, global_step=step)

    for mode in (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT):
        g = build(mode, tmp_path, train=schedule)
        with g.graph.as_default():
            assert tf.compat.v1.train.get_global_step().op.name == "global_step"
    assert graph.check_cross_shard(build(ModeKeys.TRAIN, tmp_path, train=schedule), "fn", 8) == []


def test_a_plain_estimator_spec_fails_only_where_the_tpu_loops_refuse_it(tmp_path):
    def plain_spec(features, labels, mode, params):
        w = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.ones_initializer())
        y = features["x"] * w
        if mode == ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"y": y})
        loss = tf.reduce_mean(tf.square(y - labels))
        train_op = optimizer().minimize(loss, tf.compat.v1.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    train = graph.build_mode_graph(plain_spec, ModeKeys.TRAIN, INFO, TARGET, str(tmp_path))
    assert graph.check_spec(train, "fn") == []  # TPUEstimator's train loop takes an EstimatorSpec
    predict = graph.build_mode_graph(
        plain_spec, ModeKeys.PREDICT, InputInfo(INFO.features, None, None), TARGET, str(tmp_path)
    )
    (finding,) = graph.check_spec(predict, "fn")
    assert (finding.name, finding.severity) == ("spec:infer", FAILS)
    assert finding.message == (
        "infer model_fn fn returned EstimatorSpec, not a TPUEstimatorSpec: TPUEstimator accepts it on the CPU and "
        "when exporting, but its TPU prediction loop raises RuntimeError ('estimator_spec used by TPU prediction "
        "must have type TPUEstimatorSpec'). Fix: return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, "
        "predictions=..., export_outputs=... (the same arguments))"
    )
    assert graph.check_predictions(predict, "fn", 4) == []


def test_fused_batch_norm_reserve_space_is_not_a_dynamic_shape(tmp_path):
    def fused_batch_norm(out):
        images = tf.reshape(out, [2, 1, 1, 1])
        return tf.reshape(tf.compat.v1.layers.batch_normalization(images, training=True, fused=True), [2])

    g = build(ModeKeys.TRAIN, tmp_path, extra=fused_batch_norm)
    unknown = [t.name for op in g.graph.get_operations() for t in op.outputs if t.shape.rank is None]
    assert "batch_normalization/FusedBatchNormV3:5" in unknown  # the reserve space: XLA sizes it itself
    assert graph.check_graph_shapes(g, "fn") == []


@pytest.mark.parametrize("mode", [ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT])
def test_a_clean_model_passes_every_graph_check(mode, tmp_path):
    g = build(mode, tmp_path)
    assert graph.check_graph_strings(g, "fn") == [] and graph.check_graph_shapes(g, "fn") == []
    assert graph.check_spec(g, "fn") == []
