"""Passthrough columns (`predict.columns`): resolved against the schema with errors naming the fix, and read
on the host from the records as (value, present) without imputation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import synthetic

from estimator_lib.data import records
from estimator_lib.predict.columns import Column, host_parse_fn, passthrough_columns, read_host_columns
from estimator_lib.schema import KEY_FEATURE, LABEL_KEY

MULTICLASS = synthetic.make_schema("multiclass")


def test_columns_resolve_to_their_record_features_and_renders_in_the_order_asked():
    schema = dataclasses.replace(MULTICLASS, key_column="id")
    assert passthrough_columns(schema, ["target", "x-2", "id", "colour"]) == (
        Column("target", LABEL_KEY, "class_name"),
        Column("x-2", "f_x_2", "float"),
        Column("id", KEY_FEATURE, "key"),
        Column("colour", "f_colour", "string"),
    )
    regression = synthetic.make_schema("regression")
    assert passthrough_columns(regression, ["target"]) == (Column("target", LABEL_KEY, "float"),)
    assert passthrough_columns(MULTICLASS, []) == ()


def test_unknown_reserved_and_repeated_columns_are_refused_naming_the_fix():
    with pytest.raises(ValueError) as error:
        passthrough_columns(MULTICLASS, ["weight"])
    assert str(error.value) == (
        "passthrough column 'weight' is not in the schema; use original column names from: "
        "['colour', 'target', 'x 1', 'x-2']"
    )
    with pytest.raises(ValueError) as error:
        passthrough_columns(dataclasses.replace(MULTICLASS, key_column="class"), ["class"])
    assert str(error.value) == (
        "passthrough column 'class' collides with the output field of the same name "
        "['class', 'class_id', 'file', 'key', 'line', 'probabilities', 'record']; leave it out (the key and the "
        "row's input file and line or record are always written)"
    )
    with pytest.raises(ValueError, match=r"passthrough=\['colour', 'x 1', 'colour'\] lists a column twice"):
        passthrough_columns(MULTICLASS, ["colour", "x 1", "colour"])


def write_rows(path: str, n: int) -> None:
    """n rows keyed "k0".. with "x-2" missing in row 0 (every 17th) and labels low / mid / high."""
    rows = synthetic.make_rows(n, seed=1, task="multiclass")
    records.write_tfrecord(path, [records.encode_example(r, MULTICLASS, key=f"k{i}") for i, r in enumerate(rows)])


def test_host_parse_reads_keys_values_and_presence_without_imputing(tmp_path):
    path = str(tmp_path / "rows.tfrecord")
    write_rows(path, 3)
    rows = synthetic.make_rows(3, seed=1, task="multiclass")
    columns = passthrough_columns(MULTICLASS, ["x-2", "colour", "target"])
    serialized = list(records.read_tfrecords([path]))

    parsed = host_parse_fn(columns, MULTICLASS)(np.array(serialized, object))

    assert parsed[KEY_FEATURE].numpy().tolist() == [b"k0", b"k1", b"k2"]
    x2, present = (t.numpy() for t in parsed["x-2"])
    assert present.tolist() == [False, True, True] and x2[0] == 0.0
    assert x2[1:].tolist() == np.float32([rows[1]["x-2"], rows[2]["x-2"]]).tolist()
    assert parsed["colour"][0].numpy().tolist() == [r["colour"].encode() for r in rows]
    labels = parsed["target"][0].numpy().tolist()
    assert [("low", "mid", "high")[i] for i in labels] == [r["target"] for r in rows]


def test_the_second_read_starts_at_a_row_and_keeps_batches_of_the_batch_size(tmp_path):
    path = str(tmp_path / "rows.tfrecord")
    write_rows(path, 7)

    batches = list(read_host_columns([path], (), MULTICLASS, batch_size=2, start=3).as_numpy_iterator())

    assert [b[KEY_FEATURE].tolist() for b in batches] == [[b"k3", b"k4"], [b"k5", b"k6"]]
    assert all(set(b) == {KEY_FEATURE} for b in batches)
