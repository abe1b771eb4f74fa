"""Pass 2 on tiny chunks: each good row's exact bytes, each bad row's message naming file, line and column,
for JSON Lines (row by row) and CSV (a column at a time, doubtful rows row by row)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from estimator_lib.config import PrepareConfig
from estimator_lib.data import encode, records, score
from estimator_lib.data.plan import Decisions, encode_plan
from estimator_lib.data.read import Chunk
from estimator_lib.schema import CATEGORICAL, CLASSIFICATION, NUMERIC, FeatureSpec, LabelSpec, Schema

FEATURES = (
    FeatureSpec("bill (mm)", "f_bill_mm", NUMERIC, mean=0.0, std=1.0),
    FeatureSpec("island", "f_island", CATEGORICAL, value_type="string"),
    FeatureSpec("year", "f_year", CATEGORICAL, value_type="int"),
)
CLASSES = ("Adelie", "Gentoo")
SCHEMA = Schema(FEATURES, LabelSpec("species", CLASSIFICATION, classes=CLASSES), "id")
CONFIG = PrepareConfig(data=("rows.jsonl",), label="species", key_column="id")
GOOD = {"id": "a", "bill (mm)": 39.1, "island": "Dream", "year": 2008, "species": "Gentoo"}
# (line offset, changes to GOOD, the bad row's reason after "rows.jsonl line N")
BAD = [
    ({"id": "b", "bill (mm)": "abc"}, ", column 'bill (mm)': 'abc' is not a number (the column is numeric)"),
    (
        {"id": "c", "bill (mm)": 1e39},
        ", column 'bill (mm)': '1e+39' is outside the float32 range (the column is numeric; |x| must be < 3.4e38)",
    ),
    (
        {"id": "d", "bill (mm)": "nan"},
        ", column 'bill (mm)': 'nan' is not a finite number (the column is numeric; write a missing-value token "
        "such as NA instead)",
    ),
    (
        {"id": "e", "year": 2008.5},
        ", column 'year': '2008.5' is not a whole number (the column is an integer categorical)",
    ),
    (
        {"id": "f", "species": "Chinstrap"},
        ", column 'species': 'Chinstrap' is not one of the label classes ['Adelie', 'Gentoo'] (from the training "
        "split)",
    ),
    ({"id": None}, ", column 'id': the key is missing (every row needs a unique key)"),
    (
        {"id": "g", "island": {"name": "Dream"}},
        ', column \'island\': {"name": "Dream"} is a nested JSON value; expected a number, string, boolean or null',
    ),
]


def _plan(**changes) -> encode.EncodePlan:
    decisions = Decisions(FEATURES, CLASSIFICATION, CLASSES, False, (), SCHEMA)
    plan = encode_plan(decisions, CONFIG)
    return plan if not changes else encode.dataclasses.replace(plan, **changes)


def _task(fmt: str, text: str, rows: int, header=None) -> encode.ChunkTask:
    chunk = Chunk(0, f"rows.{fmt}", fmt, 3, text, header)
    # Every row in the training split: the key hash's unit interval point 0.99 is beyond eval and test.
    hashes = np.full(rows, int(0.99 * 2**64), np.uint64)
    return encode.ChunkTask(chunk, first_row=0, duplicates={}, occurrences={}, key_hashes=hashes)


def _records(framed) -> list:
    return [f[12:-4] for f in framed]  # TFRecord framing: length, its CRC ... the data's CRC


def _jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_json_lines_rows_are_encoded_or_reported_with_file_line_and_column():
    rows = [GOOD] + [{**GOOD, **change} for change, _ in BAD] + [{**GOOD, "id": "z", "island": None}]
    encode.init_worker(_plan())
    out = encode.encode_chunk(_task("jsonl", _jsonl(rows) + "not json\n", len(rows) + 1))
    assert out.rows == len(rows) + 1
    reasons = [b["reason"] for b in out.bad]
    assert reasons[:-1] == [f"rows.jsonl line {4 + i}{reason}" for i, (_, reason) in enumerate(BAD)]
    assert reasons[-1].startswith(f"rows.jsonl line {3 + len(rows)}: the record is not valid JSON (Expecting value")
    assert [b["line"] for b in out.bad][:2] == [4, 5] and out.bad[0]["row"]["bill (mm)"] == "abc"
    typed = {"bill (mm)": 39.1, "island": "Dream", "year": "2008", "species": "Gentoo"}
    assert _records(out.examples[0]) == [
        records.serialize_example(typed, SCHEMA, "a"),
        records.serialize_example({**typed, "island": None}, SCHEMA, "z"),
    ]
    assert out.class_counts[0] == {1: 2} and out.missing[0] == [0, 1, 0]
    assert out.numeric[0].count == 2 and out.categories[1] == {"Dream": 1}


def test_csv_rows_are_encoded_or_reported_alike():
    header = ("id", "bill (mm)", "island", "year", "species")
    lines = ["a,39.1,Dream,2008,Gentoo", "b,abc,Dream,2008,Gentoo", "c,1e39,Dream,2008.0,Gentoo", "d,40,Biscoe,2007"]
    encode.init_worker(_plan())
    out = encode.encode_chunk(_task("csv", "\n".join(lines) + "\n", len(lines), header))
    assert [b["reason"] for b in out.bad] == [
        "rows.csv line 4, column 'bill (mm)': 'abc' is not a number (the column is numeric)",
        "rows.csv line 5, column 'bill (mm)': '1e39' is outside the float32 range (the column is numeric; "
        "|x| must be < 3.4e38)",
        "rows.csv line 6: the record has 4 field(s) but the header has 5 columns",
    ]
    typed = {"bill (mm)": 39.1, "island": "Dream", "year": "2008", "species": "Gentoo"}
    assert _records(out.examples[0]) == [records.serialize_example(typed, SCHEMA, "a")]


def test_a_regression_label_and_a_derived_key():
    schema = Schema(FEATURES[:1], LabelSpec("mass", "regression"))
    config = PrepareConfig(data=("rows.jsonl",), label="mass")
    plan = encode_plan(Decisions(FEATURES[:1], "regression", (), False, (), schema), config)
    encode.init_worker(plan)
    text = _jsonl([{"bill (mm)": 40, "mass": 3750.5}, {"bill (mm)": 41, "mass": "inf"}])
    out = encode.encode_chunk(_task("jsonl", text, 2))
    key = f"{int(0.99 * 2**64):016x}-0"
    assert _records(out.examples[0]) == [records.serialize_example({"bill (mm)": 40.0, "mass": 3750.5}, schema, key)]
    assert [b["reason"] for b in out.bad] == [
        "rows.jsonl line 4, column 'mass': 'inf' is not a finite number (the label is numeric: task='regression'; "
        "write a missing-value token such as NA instead)"
    ]
    assert out.label_moments.count == 1 and out.label_moments.mean == 3750.5


def test_scoring_leaves_a_missing_or_invalid_label_out():
    plan = score.encode_plan(SCHEMA, CONFIG)
    encode.init_worker(plan)
    rows = [GOOD, {**GOOD, "id": "b", "species": None}, {**GOOD, "id": "c", "species": "Chinstrap"}]
    out = encode.encode_chunk(_task("jsonl", _jsonl(rows), 3))
    assert out.bad == [] and out.labelled == 1
    typed = {"bill (mm)": 39.1, "island": "Dream", "year": "2008", "species": "Gentoo"}
    assert _records(out.examples[score.SPLIT]) == [
        records.serialize_example(typed, SCHEMA, "a"),
        records.serialize_example(typed, SCHEMA, "b", with_label=False),
        records.serialize_example(typed, SCHEMA, "c", with_label=False),
    ]


@pytest.mark.parametrize("whole", ["2008", "2008.0", "2.008e3"])
def test_integer_categoricals_are_stored_as_whole_number_text(whole):
    plan = _plan()
    typed = encode._typed({"bill (mm)": "1", "island": "Dream", "year": whole, "species": "Adelie"}, plan)
    assert typed == [1.0, "Dream", "2008", 0]
    assert encode._serialize(typed, "k", plan) == records.serialize_example(
        {"bill (mm)": 1.0, "island": "Dream", "year": "2008", "species": "Adelie"}, SCHEMA, "k"
    )


def test_a_chunk_before_init_worker_is_refused(monkeypatch):
    monkeypatch.setattr(encode, "_PLAN", encode.WorkerPlan("encode_chunk"))
    with pytest.raises(RuntimeError, match=r"^encode_chunk ran in a process where init_worker\(plan\) was not called"):
        encode.encode_chunk(_task("jsonl", _jsonl([GOOD]), 1))
