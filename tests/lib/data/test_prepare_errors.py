"""Bad input: every case fails with a message naming file, line, column, value and expectation, or (with
bad_rows='quarantine') lands in quarantine.jsonl with its reason. Nothing is dropped silently."""

from __future__ import annotations

import gzip
import json

import pytest

from estimator_lib.data.prepare import DataError, PrepareConfig, prepare
from estimator_lib.data.read import MAX_FIELD_CHARS
from estimator_lib.schema import CATEGORICAL, NUMERIC, FeatureSpec, LabelSpec, Schema

HEADER = ["bill length (mm)", "island", "species"]


def good_rows(n):
    return [[f"{35 + i % 17}.5", ["Biscoe", "Dream"][i % 2], ["Adelie", "Gentoo"][(i // 2) % 2]] for i in range(n)]


def write(path, header, rows):
    lines = [",".join(header)] + [",".join(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def config(path, **kwargs):
    kwargs.setdefault("num_workers", 1)
    kwargs.setdefault("label", "species")
    return PrepareConfig(data=(str(path),), **kwargs)


def quarantined(out):
    with open(out / "quarantine.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_first_bad_value_fails_with_file_line_column_value_and_expectation(tmp_path):
    rows = good_rows(40)
    rows[5][0] = "abc"  # line 7 (header is line 1)
    rows[20][0] = "xyz"
    path = write(tmp_path / "data.csv", HEADER, rows)
    expected = "data.csv line 7, column 'bill length (mm)': 'abc' is not a number (the column is numeric)"
    with pytest.raises(DataError, match=r"^" + _re(expected) + r" \(fix the row, or set bad_rows='quarantine'"):
        prepare(config(path), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def _re(text):
    import re

    return re.escape(text)


def test_quarantine_holds_every_bad_row_with_its_reason(tmp_path):
    rows = good_rows(300)
    rows[3][0] = "abc"
    rows[10][0] = "nan"
    rows[11][0] = "-Inf"
    rows[12][2] = "NA"  # no label: unlabelled, not bad
    rows[13] = ["1.5", "Dream"]
    rows[14][0] = "1e39"
    path = write(tmp_path / "data.csv", HEADER, rows)
    out = tmp_path / "out"
    result = prepare(config(path, bad_rows="quarantine", max_bad_fraction=0.05), str(out))

    assert result.manifest["rows"] == {"total": 300, "written": 294, "bad": 5, "quarantined": 5, "unlabelled": 1}
    assert sum(result.counts.values()) == 294
    bad = quarantined(out)
    assert [(b["line"], b["column"], b["value"]) for b in bad] == [
        (5, "bill length (mm)", "abc"),
        (12, "bill length (mm)", "nan"),
        (13, "bill length (mm)", "-Inf"),
        (15, None, None),
        (16, "bill length (mm)", "1e39"),
    ]
    reasons = [b["reason"] for b in bad]
    assert reasons[0] == "data.csv line 5, column 'bill length (mm)': 'abc' is not a number (the column is numeric)"
    assert reasons[1] == (
        "data.csv line 12, column 'bill length (mm)': 'nan' is not a finite number (the column is numeric; "
        "write a missing-value token such as NA instead)"
    )
    assert reasons[3] == "data.csv line 15: the record has 2 field(s) but the header has 3 columns"
    assert "outside the float32 range" in reasons[4]
    assert bad[0]["row"] == {"bill length (mm)": "abc", "island": "Dream", "species": "Gentoo"}
    assert bad[3]["row"] == ["1.5", "Dream"]
    assert result.manifest["unlabelled_lines"] == {"data.csv": [14]}
    assert result.manifest["outputs"]["quarantine.jsonl"]["bytes"] == (out / "quarantine.jsonl").stat().st_size


def test_quarantine_still_fails_above_max_bad_fraction(tmp_path):
    rows = good_rows(100)
    for i in (1, 2, 3):
        rows[i][0] = "oops"
    path = write(tmp_path / "data.csv", HEADER, rows)
    with pytest.raises(
        DataError,
        match=r"^3 of 100 rows are bad so far, more than max_bad_fraction=0.02 allows; "
        r"the first: data.csv line 3, column 'bill length \(mm\)': 'oops' is not a number",
    ):
        prepare(config(path, bad_rows="quarantine", max_bad_fraction=0.02), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_no_matching_file_empty_file_and_header_only_file(tmp_path):
    with pytest.raises(DataError, match=r"^no input file matches '.*nothing-\*\.csv'; check the path"):
        prepare(config(tmp_path / "nothing-*.csv"), str(tmp_path / "out"))
    (tmp_path / "empty.csv").write_text("", encoding="utf-8")
    with pytest.raises(DataError, match=r"^the input has no rows"):
        prepare(config(tmp_path / "empty.csv"), str(tmp_path / "out"))
    path = write(tmp_path / "header.csv", HEADER, [])
    with pytest.raises(DataError, match=r"^the input has no rows"):
        prepare(config(path), str(tmp_path / "out"))


def test_missing_label_column(tmp_path):
    path = write(tmp_path / "data.csv", HEADER, good_rows(30))
    with pytest.raises(
        DataError,
        match=r"^data.csv line 1: label column 'kind' is not in the header; the columns "
        r"are \['bill length \(mm\)', 'island', 'species'\]",
    ):
        prepare(config(path, label="kind"), str(tmp_path / "out"))
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text('{"a": 1, "b": "x"}\n{"a": 2, "b": "y"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"^label column 'kind' is not in the input; the columns are \['a', 'b'\]"):
        prepare(config(jsonl, label="kind"), str(tmp_path / "out"))


def test_label_with_a_single_class(tmp_path):
    rows = [[r[0], r[1], "Adelie"] for r in good_rows(30)]
    path = write(tmp_path / "data.csv", HEADER, rows)
    with pytest.raises(
        DataError,
        match=r"^label column 'species' has a single class 'Adelie' in the training split "
        r"\(\d+ rows\); classification needs at least 2 classes",
    ):
        prepare(config(path), str(tmp_path / "out"))


def test_constant_regression_label(tmp_path):
    rows = [[r[0], r[1], "7.5"] for r in good_rows(30)]
    path = write(tmp_path / "data.csv", HEADER, rows)
    with pytest.raises(DataError, match=r"label column 'species' has the same value 7.5 in all \d+ training rows"):
        prepare(config(path, task="regression"), str(tmp_path / "out"))


def test_nan_and_inf_label_in_regression_are_bad_rows(tmp_path):
    rows = [[r[0], r[1], str(i * 0.5)] for i, r in enumerate(good_rows(200))]
    rows[7][2] = "inf"
    path = write(tmp_path / "data.csv", HEADER, rows)
    out = tmp_path / "out"
    result = prepare(config(path, task="regression", bad_rows="quarantine"), str(out))
    assert [b["reason"] for b in quarantined(out)] == [
        "data.csv line 9, column 'species': 'inf' is not a finite number (the label is numeric: "
        "task='regression'; write a missing-value token such as NA instead)"
    ]
    assert result.schema.label.task == "regression" and result.manifest["rows"]["bad"] == 1


def test_duplicate_keys_are_bad_rows_naming_the_first(tmp_path):
    rows = [[f"id{i}"] + r for i, r in enumerate(good_rows(150))]
    rows[40][0] = "id3"
    path = write(tmp_path / "data.csv", ["key"] + HEADER, rows)
    with pytest.raises(
        DataError,
        match=r"^data.csv line 42, column 'key': duplicate key 'id3' \(first seen at "
        r"data.csv line 5\); keys must be unique",
    ):
        prepare(config(path, key_column="key"), str(tmp_path / "out"))
    out = tmp_path / "out"
    result = prepare(config(path, key_column="key", bad_rows="quarantine"), str(out))
    assert [(b["line"], b["value"]) for b in quarantined(out)] == [(42, "id3")]
    assert sum(result.counts.values()) == 149


def _schema_file(tmp_path):
    schema = Schema(
        features=(
            FeatureSpec("bill length (mm)", "f_bill", NUMERIC),
            FeatureSpec("island", "f_island", CATEGORICAL, value_type="string"),
        ),
        label=LabelSpec("species", "classification", classes=("Gentoo", "Adelie")),
    )
    path = tmp_path / "schema.json"
    path.write_text(schema.to_json(), encoding="utf-8")
    return str(path)


def test_unknown_columns_against_a_supplied_schema(tmp_path):
    rows = [r + [str(i)] for i, r in enumerate(good_rows(60))]
    path = write(tmp_path / "data.csv", HEADER + ["surprise"], rows)
    schema_uri = _schema_file(tmp_path)
    with pytest.raises(
        DataError,
        match=r"^data.csv line 2: column\(s\) \['surprise'\] are not in the schema .*"
        r"set unknown_columns='ignore'",
    ):
        prepare(config(path, schema_uri=schema_uri), str(tmp_path / "out"))
    result = prepare(config(path, schema_uri=schema_uri, unknown_columns="ignore"), str(tmp_path / "out"))
    assert result.manifest["ignored_columns"] == ["surprise"]
    assert [f.key for f in result.schema.features] == ["f_bill", "f_island"]
    assert result.schema.label.classes == ("Gentoo", "Adelie")  # a supplied schema is kept, not re-sorted
    assert result.manifest["schema_source"] == "supplied"


def test_supplied_schema_is_enforced(tmp_path):
    rows = good_rows(200)
    rows[2][1] = "42"  # a categorical may hold digits
    rows[9][2] = "Chinstrap"  # not one of the schema's classes
    path = write(tmp_path / "data.csv", HEADER, rows)
    out = tmp_path / "out"
    result = prepare(config(path, schema_uri=_schema_file(tmp_path), bad_rows="quarantine"), str(out))
    assert [b["reason"] for b in quarantined(out)] == [
        "data.csv line 11, column 'species': 'Chinstrap' is not one of the label classes ['Gentoo', 'Adelie'] "
        "(from the training split)"
    ]
    assert set(result.schema.feature("island").vocabulary) <= {"Biscoe", "Dream", "42"}


def test_jsonl_bad_records(tmp_path):
    lines = [json.dumps({"x": i, "y": ["a", "b"][i % 2]}) for i in range(120)]
    lines[4] = "{not json"
    lines[6] = "[1, 2]"
    lines[8] = json.dumps({"x": [1], "y": "a"})
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    prepare(config(path, label="y", bad_rows="quarantine", max_bad_fraction=0.05), str(out))
    reasons = [b["reason"] for b in quarantined(out)]
    assert reasons[0].startswith("data.jsonl line 5: the record is not valid JSON")
    assert reasons[1] == 'data.jsonl line 7: the record is a JSON list, expected an object {"column": value, ...}'
    assert reasons[2] == (
        "data.jsonl line 9, column 'x': [1] is a nested JSON value; expected a number, string, boolean or null"
    )


def test_not_utf8(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"a,species\n1,x\n\xff\xfe,y\n")
    with pytest.raises(DataError, match=r"^data.csv: the bytes near offset \d+ are not UTF-8 text"):
        prepare(config(path), str(tmp_path / "out"))


# -- compressed input and long fields ---------------------------------------------------------------------------------
SHORT_HEADER = ["bill", "island", "species"]


def test_gzip_compressed_csv_and_jsonl_prepare_like_the_plain_files(tmp_path):
    (tmp_path / "plain").mkdir()
    plain = write(tmp_path / "plain" / "rows.csv", SHORT_HEADER, good_rows(60))
    with open(plain, "rb") as f:
        data = f.read()
    packed = tmp_path / "packed" / "rows.csv.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(data))
    a = prepare(config(plain), str(tmp_path / "a"))
    b = prepare(config(str(packed)), str(tmp_path / "b"))
    assert a.schema == b.schema and a.counts == b.counts
    assert a.manifest["outputs"] == b.manifest["outputs"]  # the same bytes: rows, shards, schema

    lines = [json.dumps({"bill": float(i), "island": "rg"[i % 2], "species": "yn"[i % 2]}) for i in range(60)]
    jsonl = tmp_path / "rows.jsonl.gz"
    jsonl.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    assert sum(prepare(config(str(jsonl)), str(tmp_path / "c")).counts.values()) == 60


def test_a_truncated_gzip_file_fails_naming_it(tmp_path):
    plain = write(tmp_path / "rows.csv", SHORT_HEADER, good_rows(500))
    with open(plain, "rb") as f:
        packed = gzip.compress(f.read())
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(
        DataError, match=r"^cut\.csv\.gz: cannot decompress it as gzip \(.*\); check the file is complete"
    ):
        prepare(config(str(cut)), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_field_over_the_limit_names_its_column_and_the_limit(tmp_path):
    rows = good_rows(20)
    rows[7] = rows[7][:1] + ["r" * (MAX_FIELD_CHARS + 1)] + rows[7][2:]
    path = write(tmp_path / "long.csv", SHORT_HEADER, rows)
    with pytest.raises(DataError) as error:
        prepare(config(path), str(tmp_path / "out"))
    assert str(error.value) == (
        f"long.csv line 9: column 'island' holds a value longer than {MAX_FIELD_CHARS} characters, the largest "
        "CSV field prepare reads; shorten it or drop the column"
    )
    rows[7][1] = "r" * 200_000  # over Python's default 128 KiB limit, within ours
    assert (
        sum(prepare(config(write(tmp_path / "ok.csv", SHORT_HEADER, rows)), str(tmp_path / "ok")).counts.values()) == 20
    )
