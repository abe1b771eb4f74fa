"""Typed rows through a schema to Example bytes and back; checks of TFRecords made elsewhere name the file."""

from __future__ import annotations

import math

import pytest
import tensorflow as tf

from estimator_lib.data import records
from estimator_lib.data.common import DataError
from estimator_lib.schema import CATEGORICAL, NUMERIC, FeatureSpec, LabelSpec, Schema, SchemaError

FEATURES = (
    FeatureSpec("bill (mm)", "f_bill_mm", NUMERIC, mean=40.0, std=5.0),
    FeatureSpec("island", "f_island", CATEGORICAL, value_type="string", vocabulary=("Biscoe", "Dream")),
    FeatureSpec("year", "f_year", CATEGORICAL, value_type="int", vocabulary=("2007", "2008")),
)
SCHEMA = Schema(FEATURES, LabelSpec("species", "classification", classes=("Adelie", "Gentoo")))
REGRESSION_SCHEMA = Schema(FEATURES, LabelSpec("mass", "regression"))
ROW = {"bill (mm)": 39.1, "island": "Dream", "year": 2008.0, "species": "Gentoo"}


def _features(example: tf.train.Example) -> dict:
    out = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[key] = (kind, list(getattr(feature, kind).value))
    return out


def test_a_row_is_encoded_through_the_schema():
    example = records.encode_example(ROW, SCHEMA, key="row-1")
    assert _features(example) == {
        "example_key": ("bytes_list", [b"row-1"]),
        "f_bill_mm": ("float_list", [pytest.approx(39.1)]),
        "f_island": ("bytes_list", [b"Dream"]),
        "f_year": ("bytes_list", [b"2008"]),  # 2008.0 -> "2008": the canonical category
        "label": ("int64_list", [1]),
    }
    assert records.serialize_example(ROW, SCHEMA, key="row-1") == example.SerializeToString(deterministic=True)


def test_missing_values_and_the_label_are_left_out():
    row = {"bill (mm)": None, "island": "Biscoe", "mass": 3750}
    example = records.encode_example(row, REGRESSION_SCHEMA, key="k", with_label=False)
    assert sorted(example.features.feature) == ["example_key", "f_island"]
    with_label = records.encode_example(row, REGRESSION_SCHEMA, key="k")
    assert with_label.features.feature["label"].float_list.value == [3750.0]


def test_decode_returns_the_typed_row():
    serialized = records.serialize_example(ROW, SCHEMA, key="row-1")
    assert records.decode_example(serialized, SCHEMA) == {
        "__key__": "row-1",
        "bill (mm)": pytest.approx(39.1),
        "island": "Dream",
        "year": "2008",
        "species": "Gentoo",
    }
    unlabelled = records.serialize_example({"island": "Biscoe"}, SCHEMA, key="k", with_label=False)
    assert records.decode_example(unlabelled, SCHEMA) == {
        "__key__": "k",
        "bill (mm)": None,
        "island": "Biscoe",
        "year": None,
    }


def test_canonical_categories():
    assert [records.canonical_category(v) for v in (3, 3.0, -0.0, 2.5, "a", math.inf)] == [
        "3",
        "3",
        "0",
        "2.5",
        "a",
        "inf",
    ]


@pytest.mark.parametrize(
    "row, message",
    [
        ({"bill (mm)": math.inf}, "column 'bill (mm)': inf is not a finite number"),
        ({"bill (mm)": math.nan}, "column 'bill (mm)': nan is not a finite number"),
        ({"bill (mm)": 1e39}, "column 'bill (mm)': 1e+39 is outside the float32 range"),
        ({"bill (mm)": "40"}, "column 'bill (mm)': '40' is not a finite number"),
        ({"species": None}, "label column 'species' is missing a value"),
        (
            {"species": "Chinstrap"},
            "label column 'species': 'Chinstrap' is not one of the classes ['Adelie', 'Gentoo']",
        ),
    ],
)
def test_values_the_schema_cannot_hold_name_the_column(row, message):
    with pytest.raises(SchemaError) as e:
        records.serialize_example({**ROW, **row}, SCHEMA, key="k")
    assert str(e.value) == message


def test_a_regression_label_must_be_a_valid_number():
    with pytest.raises(SchemaError, match=r"^label column 'mass': -inf is not a finite number$"):
        records.serialize_example({"mass": -math.inf}, REGRESSION_SCHEMA, key="k")


def _write(path, rows, schema=SCHEMA):
    examples = [records.encode_example(r, schema, key=str(i)) for i, r in enumerate(rows)]
    return records.write_tfrecord(str(path), examples)


def test_tfrecords_round_trip(tmp_path):
    assert _write(tmp_path / "a.tfrecord", [ROW, {**ROW, "island": "Biscoe"}]) == 2
    decoded = [records.decode_example(r, SCHEMA) for r in records.read_tfrecords([str(tmp_path / "a.tfrecord")])]
    assert [(d["__key__"], d["island"]) for d in decoded] == [("0", "Dream"), ("1", "Biscoe")]


def test_records_of_another_schema_are_refused_naming_the_features(tmp_path):
    _write(tmp_path / "a.tfrecord", [ROW])
    other = Schema(
        (FeatureSpec("flipper", "f_flipper", NUMERIC, mean=200.0, std=10.0), FEATURES[1]),
        SCHEMA.label,
    )
    path = str(tmp_path / "a.tfrecord")
    with pytest.raises(DataError) as e:
        records.check_features([path], other)
    assert str(e.value) == (
        f"{path}: these records were not prepared with this model's schema: feature(s) ['flipper'] are absent "
        "from all 1 records read; feature key(s) ['f_bill_mm', 'f_year'] are not in the schema. Prepare them "
        "with the model's schema (PrepareConfig.schema_uri) or score the raw rows instead"
    )
    records.check_features([path], SCHEMA)  # the same schema: no error


def test_a_truncated_file_is_named(tmp_path):
    good, bad = str(tmp_path / "good.tfrecord"), str(tmp_path / "bad.tfrecord")
    _write(good, [ROW])
    _write(bad, [ROW, ROW])
    with open(bad, "rb") as f:
        data = f.read()
    with open(bad, "wb") as f:
        f.write(data[:-7])
    assert records.find_corrupt_file([good]) is None
    found = records.find_corrupt_file([good, bad])
    assert found.startswith(f"{bad}: corrupt or truncated TFRecord (")
    with pytest.raises(DataError) as e:
        with records.named_data_loss([good, bad]):
            list(records.read_tfrecords([good, bad]))
    assert str(e.value).startswith(f"{bad}: corrupt or truncated TFRecord (")
    assert str(e.value).endswith("; re-create the file (run prepare again) or leave it out")
