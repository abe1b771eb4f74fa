"""A JSON Lines row whose column holds a list or an object (a vector, a sequence, a nested record) fails naming the
file, the line and the field, says such a value is not a column value, and points to the way for vectors: a
user's own model_fn on TFRecords with a feature spec (docs/byom.md). Real preparations of tiny files."""

from __future__ import annotations

import json

import pytest

from estimator_lib.config import PrepareConfig
from estimator_lib.data.common import DataError
from estimator_lib.data.prepare import encode_for_scoring, prepare

HELP = (
    "a list or an object is not a column value. Vectors and sequences go through your own model_fn instead: write "
    "them as TFRecords of tf.train.Example described by a feature spec, and give --model-fn and --feature-spec "
    "(see docs/byom.md)"
)
FIX = " (fix the row, or set bad_rows='quarantine' to set bad rows aside)"


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def prepare_rows(tmp_path, rows, **changes):
    config = PrepareConfig(data=(write_jsonl(tmp_path / "rows.jsonl", rows),), label="label", num_workers=1, **changes)
    return prepare(config, str(tmp_path / "prepared"))


def test_rows_of_vectors_fail_naming_the_first_and_the_way_for_vectors(tmp_path):
    rows = [{"x": [1, 2, 3], "label": 1}, {"x": [4, 5, 6], "label": 0}]
    with pytest.raises(DataError) as error:
        prepare_rows(tmp_path, rows)
    assert str(error.value) == (
        "no record of the input can be read as a row; the first: rows.jsonl line 1, column 'x': [1, 2, 3] is a "
        f"nested JSON value; expected a number, string, boolean or null; {HELP}"
    )


def test_rows_of_objects_fail_the_same_way(tmp_path):
    rows = [{"id": 1, "x": {"a": 1, "b": [2]}, "label": 1}] * 3
    with pytest.raises(DataError) as error:
        prepare_rows(tmp_path, rows)
    assert str(error.value) == (
        "no record of the input can be read as a row; the first: rows.jsonl line 1, column 'x': "
        f'{{"a": 1, "b": [2]}} is a nested JSON value; expected a number, string, boolean or null; {HELP}'
    )


def test_one_nested_row_among_good_ones_fails_at_its_line(tmp_path):
    rows = [{"x": i, "label": i % 2} for i in range(12)]
    rows[6] = {"x": {"a": 1}, "label": 0}
    with pytest.raises(DataError) as error:
        prepare_rows(tmp_path, rows)
    assert str(error.value) == (
        f"rows.jsonl line 7, column 'x': {{\"a\": 1}} is a nested JSON value; expected a number, string, boolean or "
        f"null; {HELP}{FIX}"
    )


def test_quarantined_nested_rows_keep_their_reason_and_too_many_fail_with_the_way(tmp_path):
    rows = [{"x": i, "label": i % 2} for i in range(40)]
    rows[3] = {"x": [1, 2], "label": 1}
    prepared = prepare_rows(tmp_path, rows, bad_rows="quarantine", max_bad_fraction=0.05)
    with open(tmp_path / "prepared" / "quarantine.jsonl", encoding="utf-8") as f:
        quarantined = [json.loads(line) for line in f]
    assert [(q["line"], q["column"], q["value"], q["reason"]) for q in quarantined] == [
        (
            4,
            "x",
            [1, 2],
            "rows.jsonl line 4, column 'x': [1, 2] is a nested JSON value; expected a number, string, boolean or null",
        )
    ]
    assert prepared.manifest["rows"]["quarantined"] == 1
    rows[5] = rows[9] = {"x": [3], "label": 0}
    with pytest.raises(DataError) as error:
        prepare_rows(tmp_path, rows, bad_rows="quarantine", max_bad_fraction=0.05)
    assert str(error.value) == (
        "3 of 40 rows are bad so far, more than max_bad_fraction=0.05 allows; the first: rows.jsonl line 4, column "
        f"'x': [1, 2] is a nested JSON value; expected a number, string, boolean or null; {HELP}. Fix the data, or "
        "raise max_bad_fraction"
    )


def test_a_label_only_in_unreadable_rows_is_missing_and_the_first_unreadable_is_named(tmp_path):
    rows = [{"x": 1}, {"x": [1], "label": 1}, {"x": 2}]
    with pytest.raises(DataError) as error:
        prepare_rows(tmp_path, rows)
    assert str(error.value) == (
        "label column 'label' is not in the input; the columns are ['x']; records that cannot be read add no "
        "column, the first: rows.jsonl line 2, column 'x': [1] is a nested JSON value; expected a number, string, "
        f"boolean or null; {HELP}"
    )


def test_records_that_are_not_objects_are_named_without_the_way_for_vectors(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("[1, 2, 3]\n[4, 5, 6]\n", encoding="utf-8")
    with pytest.raises(DataError) as error:
        prepare(PrepareConfig(data=(str(path),), label="label", num_workers=1), str(tmp_path / "prepared"))
    assert str(error.value) == (
        "no record of the input can be read as a row; the first: rows.jsonl line 1: the record is a JSON list, "
        'expected an object {"column": value, ...}'
    )


def test_scoring_rows_of_vectors_fail_the_same_way(tmp_path):
    prepared = prepare_rows(tmp_path, [{"x": i, "label": i % 2} for i in range(20)])
    rows = write_jsonl(tmp_path / "new.jsonl", [{"x": [0.5, 1.5]}, {"x": [2.5]}])
    with pytest.raises(DataError) as error:
        encode_for_scoring(rows, prepared.schema, str(tmp_path / "scored"), num_workers=1)
    assert str(error.value) == (
        "no record of the input can be read as a row; the first: new.jsonl line 1, column 'x': [0.5, 1.5] is a "
        f"nested JSON value; expected a number, string, boolean or null; {HELP}"
    )
