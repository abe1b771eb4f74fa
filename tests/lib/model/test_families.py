"""model/families: the built-in "linear" and "dnn" logits, computed again in numpy from the variables they
create (exact names, shapes and values), dropout only in training, and loading a family by name."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib.config import ModelConfig
from estimator_lib.config.job import MIN_L2
from estimator_lib.model.families import BUILTIN, ModelContext, load_logits_fn
from estimator_lib.model.families.dnn import dnn_logits
from estimator_lib.model.families.linear import linear_logits

ModeKeys = tf.estimator.ModeKeys
X1 = np.float32([5.0, -1.0, 2.0])
X2 = np.float32([-1.5, 0.0, -1.0])
COLOUR = np.int32([0, 3, 2])  # red, the out-of-vocabulary id, blue


def features():
    return {"f_x_1": tf.constant(X1), "f_x_2": tf.constant(X2), "f_colour": tf.constant(COLOUR)}


def context(task="multiclass", mode=ModeKeys.EVAL, schema=None, **model) -> ModelContext:
    schema = schema or synthetic.make_schema(task)
    model = {"hidden_units": (4, 3), "embedding_dim": 2, "l2": 0.0, **model}
    return ModelContext(schema, ModelConfig(**model), mode, schema.label.num_logits)


def normalized() -> np.ndarray:
    """The numerics standardised with the schema's statistics (x 1: mean 2, std 3; x-2: mean -1, std 0.5)."""
    return np.stack([(X1 - np.float32(2.0)) / np.float32(3.0), (X2 - np.float32(-1.0)) / np.float32(0.5)], axis=1)


def build(fn, ctx, feats=features):
    """(static logits shape, logits, {variable name: value}) after a seeded initialisation; `feats` makes the
    feature tensors inside the graph."""
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(1)
        logits = fn(feats(), ctx)
        variables = tf.compat.v1.global_variables()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            values = session.run({v.op.name: v for v in variables})
            return logits.shape.as_list(), session.run(logits), values


# -- linear --------------------------------------------------------------------------------------------------
def test_linear_logits_are_category_weights_plus_a_dense_layer_of_numerics():
    shape, logits, v = build(linear_logits, context())
    assert {k: a.shape for k, a in v.items()} == {
        "linear/categorical_weights/f_colour": (4, 3),
        "linear/numeric/kernel": (2, 3),
        "linear/numeric/bias": (3,),
    }
    expected = v["linear/categorical_weights/f_colour"][COLOUR] + normalized() @ v["linear/numeric/kernel"]
    assert shape == [3, 3]
    np.testing.assert_allclose(logits, expected + v["linear/numeric/bias"], rtol=1e-6, atol=1e-6)


def test_linear_without_numerics_has_its_own_bias():
    schema = synthetic.make_schema("binary").select(["colour"])
    shape, logits, v = build(linear_logits, context(schema=schema), lambda: {"f_colour": tf.constant(COLOUR)})
    assert sorted(v) == ["linear/bias", "linear/categorical_weights/f_colour"]
    assert shape == [3, 1] and v["linear/bias"].tolist() == [0.0]
    np.testing.assert_array_equal(logits, v["linear/categorical_weights/f_colour"][COLOUR])


# -- dnn -----------------------------------------------------------------------------------------------------
def relu(x):
    return np.maximum(x, 0)


def test_dnn_logits_are_relu_layers_over_embeddings_and_numerics():
    shape, logits, v = build(dnn_logits, context())
    assert {k: a.shape for k, a in v.items()} == {
        "dnn/embeddings/f_colour": (4, 2),
        "dnn/hidden_0/kernel": (4, 4),
        "dnn/hidden_0/bias": (4,),
        "dnn/hidden_1/kernel": (4, 3),
        "dnn/hidden_1/bias": (3,),
        "dnn/logits/kernel": (3, 3),
        "dnn/logits/bias": (3,),
    }
    x = np.concatenate([v["dnn/embeddings/f_colour"][COLOUR], normalized()], axis=1)  # embeddings first
    for layer in ("hidden_0", "hidden_1"):
        x = relu(x @ v[f"dnn/{layer}/kernel"] + v[f"dnn/{layer}/bias"])
    assert shape == [3, 3]
    np.testing.assert_allclose(logits, x @ v["dnn/logits/kernel"] + v["dnn/logits/bias"], rtol=1e-5, atol=1e-6)


def test_dnn_without_categoricals_and_with_binary_width():
    schema = synthetic.make_schema("binary").select(["x 1", "x-2"])
    shape, _, v = build(
        dnn_logits,
        context(schema=schema, hidden_units=(5,)),
        lambda: {"f_x_1": tf.constant(X1), "f_x_2": tf.constant(X2)},
    )
    assert shape == [3, 1]
    assert sorted(v) == ["dnn/hidden_0/bias", "dnn/hidden_0/kernel", "dnn/logits/bias", "dnn/logits/kernel"]
    assert v["dnn/hidden_0/kernel"].shape == (2, 5)


def dropout_ops(ctx) -> list:
    with tf.Graph().as_default() as graph:
        dnn_logits(features(), ctx)
        return [op.name for op in graph.get_operations() if "dropout" in op.name.lower()]


def test_dropout_only_in_training_and_only_when_set():
    assert dropout_ops(context(mode=ModeKeys.TRAIN, dropout=0.5))
    assert not dropout_ops(context(mode=ModeKeys.EVAL, dropout=0.5))
    assert not dropout_ops(context(mode=ModeKeys.PREDICT, dropout=0.5))
    assert not dropout_ops(context(mode=ModeKeys.TRAIN, dropout=0.0))


def penalties(ctx: ModelContext) -> list:
    with tf.Graph().as_default():
        dnn_logits(features(), ctx)
        return tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES)


def test_l2_adds_one_penalty_per_kernel_and_embedding_in_training_only():
    assert len(penalties(context(mode=ModeKeys.TRAIN, l2=0.01))) == 4  # the embedding, three kernels; no bias
    assert penalties(context(mode=ModeKeys.EVAL, l2=0.01)) == penalties(context(mode=ModeKeys.EVAL, l2=None)) == []


def test_a_null_l2_in_a_graph_built_without_the_datas_size_takes_the_floor():
    with tf.Graph().as_default():
        dnn_logits(features(), context(mode=ModeKeys.TRAIN, l2=None))
        floor = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            got = session.run(floor)
            weights = session.run(tf.compat.v1.trainable_variables())
    kernels = [w for w in weights if w.ndim == 2]
    assert len(got) == len(kernels) == 4
    assert sorted(got) == pytest.approx(sorted(MIN_L2 * float((w.astype("float64") ** 2).sum()) for w in kernels))


# -- loading a family ----------------------------------------------------------------------------------------
def test_builtin_and_plugin_families_load():
    assert load_logits_fn(ModelConfig(family="linear")) is linear_logits
    assert load_logits_fn(ModelConfig(family="dnn")) is dnn_logits
    assert set(BUILTIN) == {"linear", "dnn"}
    import plugin_model

    assert load_logits_fn(ModelConfig(family="plugin_model:tiny_logits")) is plugin_model.tiny_logits


def test_plugin_errors_say_how_to_fix():
    with pytest.raises(ValueError) as e:
        load_logits_fn(ModelConfig(family="no_such_pkg.mod:fn"))
    assert str(e.value).startswith("model.family='no_such_pkg.mod:fn': cannot import module 'no_such_pkg.mod' (")
    assert str(e.value).endswith("make it importable (install it, or put it on PYTHONPATH) or use 'linear'/'dnn'")
    with pytest.raises(ValueError) as e:
        load_logits_fn(ModelConfig(family="plugin_model:SEEN"))  # exists, but is a list, not a function
    assert str(e.value) == (
        "model.family='plugin_model:SEEN': module 'plugin_model' has no function 'SEEN'; it must define "
        "def SEEN(features, ctx) -> logits [batch, ctx.num_logits]"
    )


def test_context_training_flag():
    assert context(mode=ModeKeys.TRAIN).training and not context(mode=ModeKeys.EVAL).training
    assert dataclasses.replace(context(), num_logits=7).num_logits == 7
