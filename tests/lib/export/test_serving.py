"""export/serving.py: the serving input receiver built in a TF1 graph and run: the serialized-Example input,
the raw-feature alternative (feeding it cuts the parse out), and the TPU-safe features both give."""

from __future__ import annotations

import numpy as np
import synthetic
import tensorflow as tf

from estimator_lib.data import records
from estimator_lib.export import serving
from estimator_lib.schema import PADDING_FEATURE

SCHEMA = synthetic.make_schema("multiclass")  # x 1 (mean 2), x-2 (mean -1), colour (red, green, blue + 1 OOV)


def serialized(rows):
    return [records.encode_example(r, SCHEMA, key=f"k{i}").SerializeToString() for i, r in enumerate(rows)]


def test_names_and_raw_input_dtypes():
    assert (serving.EXAMPLES_INPUT, serving.RAW_RECEIVER) == ("examples", "raw")
    assert (serving.PREDICT_SIGNATURE, serving.RAW_PREDICT_SIGNATURE) == ("predict", "raw:predict")
    assert serving.raw_input_dtypes(SCHEMA) == {"f_x_1": tf.float32, "f_x_2": tf.float32, "f_colour": tf.string}
    assert serving.raw_input_dtypes(SCHEMA.select(["colour"])) == {"f_colour": tf.string}


def test_receiver_tensors_and_feature_dtypes():
    with tf.Graph().as_default():
        receiver = serving.serving_input_receiver_fn_builder(SCHEMA)()
        (examples,) = receiver.receiver_tensors.values()
        assert list(receiver.receiver_tensors) == ["examples"] and examples.dtype == tf.string
        assert examples.shape.as_list() == [None] and examples.op.type == "Placeholder"
        raw = receiver.receiver_tensors_alternatives["raw"]
        assert {k: (t.dtype, t.shape.as_list(), t.op.type) for k, t in raw.items()} == {
            "f_x_1": (tf.float32, [None], "PlaceholderWithDefault"),
            "f_x_2": (tf.float32, [None], "PlaceholderWithDefault"),
            "f_colour": (tf.string, [None], "PlaceholderWithDefault"),
        }
        assert {k: t.dtype for k, t in receiver.features.items()} == {
            "f_x_1": tf.float32,
            "f_x_2": tf.float32,
            "f_colour": tf.int32,
        }
        assert PADDING_FEATURE not in receiver.features  # serving has no padded rows


def test_examples_are_parsed_imputed_and_looked_up():
    rows = [
        {"x 1": 4.5, "x-2": None, "colour": "blue", "target": "low"},
        {"x 1": None, "x-2": 0.25, "colour": "purple", "target": "high"},
        {"x 1": -1.0, "x-2": -2.0, "colour": None, "target": "mid"},
    ]
    with tf.Graph().as_default():
        receiver = serving.serving_input_receiver_fn_builder(SCHEMA)()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.tables_initializer())
            got = session.run(receiver.features, {receiver.receiver_tensors["examples"]: serialized(rows)})
    assert got["f_x_1"].tolist() == [4.5, 2.0, -1.0]  # missing: the training mean
    assert got["f_x_2"].tolist() == [-1.0, 0.25, -2.0]
    assert got["f_colour"].tolist() == [2, 3, 3]  # unknown and missing share the OOV id


def test_feeding_raw_features_bypasses_the_examples():
    with tf.Graph().as_default():
        receiver = serving.serving_input_receiver_fn_builder(SCHEMA)()
        raw = receiver.receiver_tensors_alternatives["raw"]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.tables_initializer())
            got = session.run(
                receiver.features,
                {
                    raw["f_x_1"]: np.float32([1.0, 2.0]),
                    raw["f_x_2"]: np.float32([3.0, 4.0]),
                    raw["f_colour"]: np.array([b"green", b"red"]),
                },
            )  # no "examples" fed: the parse is not run
    assert got["f_x_1"].tolist() == [1.0, 2.0] and got["f_x_2"].tolist() == [3.0, 4.0]
    assert got["f_colour"].tolist() == [1, 0]


def test_a_selected_schema_asks_for_its_features_only():
    with tf.Graph().as_default():
        receiver = serving.serving_input_receiver_fn_builder(SCHEMA.select(["x-2", "colour"]))()
        assert sorted(receiver.receiver_tensors_alternatives["raw"]) == ["f_colour", "f_x_2"]
        assert sorted(receiver.features) == ["f_colour", "f_x_2"]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.tables_initializer())
            examples = serialized([{"x 1": 9.0, "x-2": 0.5, "colour": "red", "target": "low"}])
            got = session.run(receiver.features, {receiver.receiver_tensors["examples"]: examples})
    assert got["f_x_2"].tolist() == [0.5] and got["f_colour"].tolist() == [0]
