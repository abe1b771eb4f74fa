"""JSON Lines formatting (`predict.jsonl`): exact bytes per row for every kind of column, and numbers as the
shortest text that reads back bitwise. No model: the outputs are written by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
import synthetic

from estimator_lib.predict import PredictionError
from estimator_lib.predict.columns import passthrough_columns
from estimator_lib.predict.jsonl import RowFormatter, json_numbers
from estimator_lib.predict.origins import RecordOrigins
from estimator_lib.schema import CATEGORICAL, KEY_FEATURE, NUMERIC, FeatureSpec, LabelSpec, Schema


def formatter_for(schema: Schema, passthrough) -> RowFormatter:
    """Rows placed as records 0, 1, ... of one TFRecord file "in.tfrecord"."""
    return RowFormatter(schema, passthrough_columns(schema, passthrough), RecordOrigins(["in.tfrecord"], [10]))


def test_formatter_writes_exact_json_for_plain_and_escaped_keys():
    """The batch formatter's bytes equal json.dumps per row (floats as their shortest float32 text), whatever
    the keys hold."""
    formatter = formatter_for(synthetic.make_schema("multiclass"), ["colour"])
    probabilities = np.array([[0.125, 0.5, 0.375], [1 / 3, 1 / 3, 1 / 3], [0.0, 1e-9, 1.0]], np.float32)
    outputs = {"probabilities": probabilities, "class_ids": np.array([1, 0, 2], np.int64)}
    colours = (np.array([b"red", b"", b'bl"ue'], object), np.array([True, False, True]))
    shortest = {0.125: "0.125", 0.5: "0.5", 0.375: "0.375", 1 / 3: "0.33333334", 0.0: "0.0", 1e-9: "1e-9", 1.0: "1.0"}
    shortest = {np.float32(v): text for v, text in shortest.items()}

    def expected(keys):
        rows = []
        for i, (key, colour, p, k) in enumerate(zip(keys, ["red", None, 'bl"ue'], probabilities, [1, 0, 2])):
            probs = ", ".join(f'"{c}": {shortest[v]}' for c, v in zip(("low", "mid", "high"), p))
            rows.append(
                f'{{"key": {json.dumps(key, ensure_ascii=False)}, "file": "in.tfrecord", "record": {i}, '
                f'"colour": {json.dumps(colour)}, '
                f'"class": "{("low", "mid", "high")[k]}", "class_id": {k}, "probabilities": {{{probs}}}}}\n'
            )
        return "".join(rows).encode("utf-8")

    for keys in (["row-0", "row-1", "row-2"], ['a"b', "c\\d\te\x01", "žluť\nkód"]):
        host = {KEY_FEATURE: np.array([k.encode("utf-8") for k in keys], object), "colour": colours}
        text = formatter.format(host, outputs, 0)
        assert text == expected(keys)
        assert [json.loads(line)["key"] for line in text.decode("utf-8").splitlines()] == keys
    with pytest.raises(UnicodeDecodeError):  # a key cut inside a UTF-8 sequence is refused, not written
        formatter.format({KEY_FEATURE: np.array([b"a\xc5", b"\xbeb", b"c"], object), "colour": colours}, outputs, 0)


def test_formatter_names_a_passthrough_column_whose_value_json_cannot_hold():
    formatter = formatter_for(synthetic.make_schema("multiclass"), ["x-2"])
    outputs = {"probabilities": np.full((2, 3), 1 / 3, np.float32), "class_ids": np.array([0, 1], np.int64)}
    keys = np.array([b"a", b"b"], object)
    missing_nan = (np.float32([np.nan, 0.5]), np.array([False, True]))  # missing: null, never formatted
    assert formatter.format({KEY_FEATURE: keys, "x-2": missing_nan}, outputs, 0).startswith(
        b'{"key": "a", "file": "in.tfrecord", "record": 0, "x-2": null'
    )
    with pytest.raises(PredictionError, match=r"passthrough column 'x-2': non-finite values \[inf\]"):
        formatter.format({KEY_FEATURE: keys, "x-2": (np.float32([np.inf, 0.5]), np.array([True, True]))}, outputs, 0)


def test_json_numbers_are_the_shortest_text_that_reads_back_bitwise():
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    values = np.concatenate([values[np.isfinite(values)], np.float32([0.0, -0.0, 1e-45, 3.4028235e38, 0.1, 1 / 3])])
    texts = json_numbers(values)
    assert len(texts) == len(values)
    back = np.array([json.loads(t) for t in texts], np.float64).astype(np.float32)
    np.testing.assert_array_equal(back.view(np.uint32), values.view(np.uint32))  # bitwise, -0.0 included

    def digits(text: str) -> int:  # significant digits of a decimal text
        mantissa = text.lower().split("e")[0].replace("-", "").replace(".", "").strip("0")
        return max(len(mantissa), 1)

    # numpy's repr is the shortest round-tripping text (Dragon4 "unique"): never more digits than that.
    assert all(digits(t.decode()) <= digits(repr(v)) for t, v in zip(texts, values))
    assert json_numbers(np.float32([0.1]))[0] == b"0.1"  # not 0.100000001
    assert json_numbers(np.float64([0.1, 1e300])) == [b"0.1", b"1e+300"]
    assert json_numbers(np.int64([0, -7, 2**40])) == [b"0", b"-7", b"1099511627776"]
    assert json_numbers(np.float32([])) == []
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="non-finite values"):
            json_numbers(np.float32([1.0, bad]))


def test_regression_rows_hold_the_value_and_the_label_as_a_number():
    formatter = formatter_for(synthetic.make_schema("regression"), ["colour", "target"])
    host = {
        KEY_FEATURE: np.array([b"a", b"b"], object),
        "colour": (np.array([b"red", b""], object), np.array([True, False])),
        "target": (np.float32([51.5, 0.0]), np.array([True, False])),
    }
    outputs = {"predictions": np.float32([[1.5], [-0.1]])}

    assert formatter.fields == ("key", "file", "record", "colour", "target", "value")
    assert formatter.format(host, outputs, 8) == (
        b'{"key": "a", "file": "in.tfrecord", "record": 8, "colour": "red", "target": 51.5, "value": 1.5}\n'
        b'{"key": "b", "file": "in.tfrecord", "record": 9, "colour": null, "target": null, "value": -0.1}\n'
    )


def test_integer_categories_class_names_and_the_key_column_pass_through_as_json():
    store = FeatureSpec("store", "f_store", CATEGORICAL, value_type="int", vocabulary=("7", "12"))
    size = FeatureSpec("size", "f_size", NUMERIC)
    schema = Schema((store, size), LabelSpec("bought", "classification", classes=("no", "yes")), key_column="id")
    formatter = formatter_for(schema, ["store", "bought", "id"])
    host = {
        KEY_FEATURE: np.array([b"k1", b"k2", b"k3"], object),
        "store": (np.array([b"007", b"-3", b"x1"], object), np.array([True, True, True])),
        "bought": (np.int64([1, 0, 5]), np.array([True, True, False])),  # a missing label is null, never a class
        "id": (np.array([b"k1", b"k2", b"k3"], object), np.array([True, True, True])),
    }
    outputs = {"probabilities": np.float32([[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]]), "class_ids": np.int64([1, 0, 0])}

    lines = formatter.format(host, outputs, 0).decode("utf-8").splitlines()

    assert formatter.fields == ("key", "file", "record", "store", "bought", "id", "class", "class_id", "probabilities")
    assert lines == [
        '{"key": "k1", "file": "in.tfrecord", "record": 0, '
        '"store": 7, "bought": "yes", "id": "k1", "class": "yes", "class_id": 1, '
        '"probabilities": {"no": 0.25, "yes": 0.75}}',
        '{"key": "k2", "file": "in.tfrecord", "record": 1, '
        '"store": -3, "bought": "no", "id": "k2", "class": "no", "class_id": 0, '
        '"probabilities": {"no": 1.0, "yes": 0.0}}',
        '{"key": "k3", "file": "in.tfrecord", "record": 2, '
        '"store": "x1", "bought": null, "id": "k3", "class": "no", "class_id": 0, '
        '"probabilities": {"no": 0.5, "yes": 0.5}}',
    ]


def test_field_and_class_names_holding_quotes_or_percent_signs_are_written_as_json():
    schema = Schema(
        (FeatureSpec("50% off", "f_50_off", NUMERIC),),
        LabelSpec("label", "classification", classes=('say "hi"', "100%")),
    )
    formatter = formatter_for(schema, ["50% off"])
    host = {KEY_FEATURE: np.array([b"a"], object), "50% off": (np.float32([2.0]), np.array([True]))}
    outputs = {"probabilities": np.float32([[0.5, 0.5]]), "class_ids": np.int64([1])}

    text = formatter.format(host, outputs, 0)

    assert text == (
        b'{"key": "a", "file": "in.tfrecord", "record": 0, "50% off": 2.0, "class": "100%", "class_id": 1, '
        b'"probabilities": {"say \\"hi\\"": 0.5, "100%": 0.5}}\n'
    )
    assert json.loads(text)["probabilities"] == {'say "hi"': 0.5, "100%": 0.5}


def test_non_finite_model_outputs_fail_naming_the_keys_and_no_rows_format_to_no_bytes():
    formatter = formatter_for(synthetic.make_schema("multiclass"), [])
    keys = np.array([b"a", b"b"], object)
    outputs = {"probabilities": np.float32([[1.0, 0.0, 0.0], [np.nan, 0.5, 0.5]]), "class_ids": np.int64([0, 1])}
    with pytest.raises(PredictionError, match=r"the model returned non-finite outputs for keys \['b'\]"):
        formatter.format({KEY_FEATURE: keys}, outputs, 0)
    empty = {"probabilities": np.zeros((0, 3), np.float32), "class_ids": np.zeros(0, np.int64)}
    assert formatter.format({KEY_FEATURE: np.array([], object)}, empty, 0) == b""
