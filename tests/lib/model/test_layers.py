"""The model families' building blocks and the CPU training loop's per-step features, in a TF1 graph."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib.config import ModelConfig
from estimator_lib.model import model_fn
from estimator_lib.model.families.layers import ModelContext, dense, normalized_numerics

TRAIN = tf.estimator.ModeKeys.TRAIN


def context(l2: float = 0.0) -> ModelContext:
    """Two numerics with statistics that are not round in binary, so a changed formula changes the bits."""
    schema = synthetic.make_schema("binary")
    numerics = [dataclasses.replace(f, mean=0.1 * (i + 1), std=0.7 / (i + 1)) for i, f in enumerate(schema.numeric)]
    features = tuple(numerics) + schema.categorical
    return ModelContext(dataclasses.replace(schema, features=features), ModelConfig(l2=l2), TRAIN, 1)


def run(fetches):
    with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        return session.run(fetches)


def test_normalized_numerics_standardise_each_column_in_float32():
    ctx = context()
    values = np.random.RandomState(0).normal(0, 5, size=(2, 7)).astype(np.float32)
    with tf.Graph().as_default():
        features = {f.key: tf.constant(values[i]) for i, f in enumerate(ctx.schema.numeric)}
        got = run(normalized_numerics(features, ctx))
    expected = [(values[i] - np.float32(f.mean)) / np.float32(f.std) for i, f in enumerate(ctx.schema.numeric)]
    assert got.shape == (7, 2)
    assert got.tobytes() == np.stack(expected, axis=1).tobytes()


def test_l2_penalty_is_l2_times_the_sum_of_squares_and_its_gradient_is_exactly_2_l2_w():
    ctx = context(l2=0.003)
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(0)  # the initialiser is random; op determinism (other tests) requires a seed
        dense(tf.ones([4, 3]), 5, ctx, name="layer")
        (kernel,) = [v for v in tf.compat.v1.global_variables() if v.name.endswith("kernel:0")]
        penalty = tf.compat.v1.losses.get_regularization_loss()
        w, value, gradient = run([kernel, penalty, tf.gradients(penalty, kernel)[0]])
    assert value == pytest.approx(0.003 * np.sum(w.astype(np.float64) ** 2), rel=1e-6)
    assert gradient.tobytes() == (np.float32(2 * 0.003) * w).tobytes()


def test_loop_step_features_are_each_features_row_i_in_the_input_order():
    """The loop stacks the [k, B] features by dtype and shape; step i must still see {key: features[key][i]}."""
    k, batch = 3, 4
    floats = np.arange(k * batch, dtype=np.float32).reshape(k, batch)
    ints = np.arange(k * batch, dtype=np.int32).reshape(k, batch) * 10
    inputs = {"b": floats, "a": ints, "c": floats + 0.5, "wide": np.ones((k, batch, 2), np.float32)}
    with tf.Graph().as_default():
        features = {key: tf.constant(v) for key, v in inputs.items()}
        packed = model_fn._stacked_by_kind(features)
        steps = [model_fn._step_features(packed, tf.constant(i), list(features)) for i in range(k)]
        assert [list(step) for step in steps] == [list(inputs)] * k
        got = run(steps)
    for i in range(k):
        for key, value in inputs.items():
            assert got[i][key].dtype == value.dtype and got[i][key].tobytes() == value[i].tobytes(), (i, key)
