"""Schema: safe keys for awkward names, JSON round trip, validation, parse specs, encode/decode."""

from __future__ import annotations

import pytest
import synthetic
import tensorflow as tf

from estimator_lib.data import records
from estimator_lib.model import transform
from estimator_lib.schema import CATEGORICAL, NUMERIC, FeatureSpec, LabelSpec, Schema, SchemaError, safe_key


@pytest.mark.parametrize(
    "name, taken, key",
    [
        ("Body Mass (g)", (), "f_body_mass_g"),
        ("bill_length_mm", (), "f_bill_length_mm"),
        ("Größe", (), "f_grosse"),
        ("Café Noir", (), "f_cafe_noir"),
        ("温度", (), "f_feature"),
        ("a-b", ("f_a_b",), "f_a_b_2"),
        ("a b", ("f_a_b", "f_a_b_2"), "f_a_b_3"),
    ],
)
def test_safe_key(name, taken, key):
    assert safe_key(name, taken) == key


def test_json_round_trip_keeps_original_names():
    schema = synthetic.make_schema("multiclass")
    again = Schema.from_json(schema.to_json())
    assert again == schema
    assert [f.name for f in again.features] == ["x 1", "x-2", "colour"]


def test_single_class_label_is_rejected():
    with pytest.raises(SchemaError, match=r"label 'y' has 1 class\(es\) \['a'\]; classification needs at least 2"):
        LabelSpec("y", "classification", classes=("a",))


def test_constant_numeric_is_rejected():
    with pytest.raises(SchemaError, match=r"numeric feature 'c': mean=1.0 and std=0.0 must be finite with std > 0"):
        FeatureSpec("c", "f_c", NUMERIC, mean=1.0, std=0.0)


def test_unknown_feature_lookup_lists_known_names():
    with pytest.raises(SchemaError, match=r"unknown feature 'nope'; the schema has: \['x 1', 'x-2', 'colour'\]"):
        synthetic.make_schema().feature("nope")


def test_heads():
    assert synthetic.make_schema("binary").label.head == "binary"
    assert synthetic.make_schema("multiclass").label.num_logits == 3
    assert synthetic.make_schema("regression").label.num_logits == 1


def test_encode_parse_transform_round_trip():
    schema = synthetic.make_schema("binary")
    rows = [
        {"x 1": 1.5, "x-2": None, "colour": "blue", "target": "yes"},
        {"x 1": -2.0, "x-2": 0.25, "colour": "purple", "target": "no"},
        {"x 1": 0.0, "x-2": 1.0, "colour": None, "target": "no"},
    ]
    serialized = [records.encode_example(r, schema, key=f"k{i}").SerializeToString() for i, r in enumerate(rows)]
    assert [records.decode_example(s, schema) for s in serialized] == [
        {"__key__": f"k{i}", **{k: v if not isinstance(v, float) else pytest.approx(v) for k, v in r.items()}}
        for i, r in enumerate(rows)
    ]
    features, label = transform.parse_batch(tf.constant(serialized), schema)
    assert features["f_x_2"].numpy().tolist() == [-1.0, 0.25, 1.0]  # missing imputed with the mean (-1.0)
    # "blue" is vocabulary id 2; unknown "purple" and missing both land in the single OOV bucket 3
    assert features["f_colour"].numpy().tolist() == [2, 3, 3]
    assert features["f_colour"].dtype == tf.int32 and label.dtype == tf.int32
    assert label.numpy().tolist() == [1, 0, 0]
    assert "example_key" not in features  # strings never reach the model


def test_encode_rejects_values_the_schema_cannot_hold():
    schema = synthetic.make_schema("binary")
    with pytest.raises(SchemaError, match=r"column 'x 1': inf is not a finite number"):
        records.encode_example({"x 1": float("inf"), "target": "yes"}, schema, key="k")
    with pytest.raises(SchemaError, match=r"label column 'target': 'maybe' is not one of the classes \['no', 'yes'\]"):
        records.encode_example({"x 1": 1.0, "target": "maybe"}, schema, key="k")


def test_categorical_without_vocabulary_hashes_into_oov_buckets():
    feature = FeatureSpec("c", "f_c", CATEGORICAL, value_type="int", vocabulary=(), num_oov_buckets=4)
    ids = transform.categorical_ids(tf.constant([1, 2, 3, 1], tf.int64), feature).numpy()
    assert ids.dtype.name == "int32" and all(0 <= i < 4 for i in ids) and ids[0] == ids[3]
