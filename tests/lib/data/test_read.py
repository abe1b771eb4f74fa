"""Reading input: files resolved in a fixed order, chunks of whole records with their line numbers, records
parsed into cleaned texts, and messages naming the file and line."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from estimator_lib.data import read
from estimator_lib.data.common import DataError
from estimator_lib.data.read import BadRecord, Chunk, FileScan

MISSING = frozenset({"", "NA"})


def _chunks(path, chunk_bytes=1 << 20):
    inputs = read.resolve_inputs([str(path)], "auto")
    scans = []
    return list(read.iter_chunks(inputs, chunk_bytes, scans)), scans


def test_inputs_resolve_in_order_with_location_free_names(tmp_path):
    (tmp_path / "b").mkdir()
    for name in ("b/2.csv", "a.jsonl", "b/1.csv.gz"):
        (tmp_path / name).write_text("x\n")
    inputs = read.resolve_inputs([str(tmp_path / "b" / "*"), str(tmp_path / "a.jsonl")], "auto")
    assert [(i.name, i.fmt) for i in inputs] == [("b/1.csv.gz", "csv"), ("b/2.csv", "csv"), ("a.jsonl", "jsonl")]
    with pytest.raises(DataError, match=r"^no input file matches '.*nothing\*\.csv'; check the path"):
        read.resolve_inputs([str(tmp_path / "nothing*.csv")], "auto")


def test_a_format_is_told_from_the_extension_or_named():
    assert read.file_format("gs://b/rows.NDJSON", "auto") == "jsonl"
    assert read.file_format("data.txt", "csv") == "csv"
    with pytest.raises(DataError) as e:
        read.file_format("data.txt", "auto")
    assert str(e.value) == (
        "cannot tell the format of 'data.txt' from its extension '.txt'; name it .csv or .jsonl (optionally "
        "gzip-compressed: .csv.gz, .jsonl.gz), or set input_format='csv' or 'jsonl'"
    )


def test_csv_chunks_hold_whole_records_and_their_first_line(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text('a,b\n1,"two\nlines"\n3,x\n4,y\n', encoding="utf-8")
    chunks, scans = _chunks(path, chunk_bytes=8)
    # 8-byte blocks: the header, then the quoted newline holds the cut back until the record is whole.
    assert [(c.first_line, c.text) for c in chunks] == [(2, '1,"two\nlines"\n3,x\n'), (5, "4,y\n")]
    assert all(c.columns == ("a", "b") for c in chunks)
    assert scans[0].size == path.stat().st_size and len(scans[0].sha256) == 64


def test_record_boundaries_skip_newlines_inside_quotes():
    assert read.record_boundary('1,"a\nb"\n2,"c\n', quoted=True) == 7
    assert read.record_boundary('1,"a\nb', quoted=True) == -1
    assert read.record_boundary('{"a": 1}\n{"b', quoted=False) == 8


def test_headers_must_name_every_column_once():
    assert read.check_header("d.csv", [" a ", "b"]) == ("a", "b")
    with pytest.raises(
        DataError, match=r"^d\.csv line 1: header column\(s\) \[2\] have no name; give every column a name$"
    ):
        read.check_header("d.csv", ["a", " ", "c"])
    with pytest.raises(
        DataError, match=r"^d\.csv line 1: column name\(s\) \['a'\] appear more than once in the header$"
    ):
        read.check_header("d.csv", ["a", "b", "a"])


def test_undecodable_and_undecompressible_files_are_named(tmp_path):
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"a,b\n1,caf\xe9\n")
    with pytest.raises(DataError) as e:
        _chunks(latin)
    assert str(e.value) == "latin.csv: the bytes near offset 9 are not UTF-8 text; save the file as UTF-8"
    fake = tmp_path / "fake.csv.gz"
    fake.write_bytes(b"a,b\n1,2\n")
    with pytest.raises(
        DataError, match=r"^fake\.csv\.gz: cannot decompress it as gzip \(.*\); check the file is complete$"
    ):
        _chunks(fake)
    real = tmp_path / "real.csv.gz"
    real.write_bytes(gzip.compress(b"a,b\n1,2\n"))
    assert [c.text for c in _chunks(real)[0]] == ["1,2\n"]


def test_csv_records_with_their_lines():
    chunk = Chunk(0, "d.csv", "csv", 5, '1,a\n\n2," b "\n3,"x\ny"\n', ("n", "w"))
    assert list(read.records(chunk)) == [(5, ["1", "a"]), (7, ["2", " b "]), (8, ["3", "x\ny"])]
    assert read.csv_records(chunk) == ([5, 7, 8], [["1", "a"], ["2", " b "], ["3", "x\ny"]])


def test_values_are_cleaned_and_a_short_record_is_refused():
    assert read.csv_values([" 1 ", "NA", ""], ("a", "b", "c"), MISSING) == ["1", None, None]
    with pytest.raises(BadRecord, match=r"^has 2 field\(s\) but the header has 3 columns$"):
        read.csv_values(["1", "2"], ("a", "b", "c"), MISSING)
    rows = [["1", " x "], ["2"], ["NA", "y"]]
    assert read.csv_columns(Chunk(0, "d.csv", "csv", 2, "1, x \n2\nNA,y\n", ("n", "w")), rows, ["n", "w"], MISSING) == {
        "n": ["1", None, None],
        "w": ["x", None, "y"],
    }
    assert read.fitting(rows, ("n", "w")).tolist() == [True, False, True]
    assert np.array_equal(read.fitting([], ("n",)), np.zeros(0, bool))


def test_json_values_become_the_text_a_csv_would_hold():
    values = read.json_values('{"x": 1.50, "n": 3, "f": true, "g": false, "s": " NA ", "t": " a ", "z": null}', MISSING)
    assert values == {"x": "1.5", "n": "3", "f": "true", "g": "false", "s": None, "t": "a", "z": None}
    with pytest.raises(BadRecord, match=r"^is a JSON list, expected an object"):
        read.json_values("[1, 2]", MISSING)
    with pytest.raises(BadRecord, match=r"^is not valid JSON \(Expecting"):
        read.json_values("{x}", MISSING)
    with pytest.raises(BadRecord) as e:
        read.json_values('{"x": [1, 2]}', MISSING)
    assert (e.value.column, e.value.value, e.value.reason) == (
        "x",
        [1, 2],
        "[1, 2] is a nested JSON value; expected a number, string, boolean or null",
    )


def test_json_lines_records_skip_blank_lines():
    chunk = Chunk(0, "r.jsonl", "jsonl", 10, '{"a": 1}\n\n  \n{"a": 2}\n', None)
    assert list(read.records(chunk)) == [(10, '{"a": 1}'), (13, '{"a": 2}')]


def test_raw_rows_for_the_quarantine():
    assert read.raw_row(["1", "x"], ("n", "w")) == {"n": "1", "w": "x"}
    assert read.raw_row(["1"], ("n", "w")) == ["1"]
    assert read.raw_row('{"a": 1}', None) == {"a": 1}
    assert read.raw_row("{oops", None) == "{oops"


def test_a_scan_starts_empty():
    assert (FileScan().sha256, FileScan().size) == ("", 0)


def test_a_record_becomes_the_same_values_in_either_format():
    csv_chunk = Chunk(0, "d.csv", "csv", 2, " 1 ,NA,x\n", ("a", "b", "c"))
    json_chunk = Chunk(0, "d.jsonl", "jsonl", 2, '{"a": 1, "b": null, "c": " x "}\n', None)
    expected = {"a": "1", "b": None, "c": "x"}
    assert read.row_values(next(read.records(csv_chunk))[1], csv_chunk, MISSING) == expected
    assert read.row_values(next(read.records(json_chunk))[1], json_chunk, MISSING) == expected
    with pytest.raises(BadRecord, match=r"^has 2 field\(s\) but the header has 3 columns$"):
        read.row_values(["1", "2"], csv_chunk, MISSING)


def test_csv_rows_of_a_chunk():
    chunk = Chunk(0, "d.csv", "csv", 4, "1, x \n2\n\nNA,y\n", ("n", "w"))
    rows = read.csv_rows(chunk, ["w"], MISSING)
    assert (rows.lines, rows.records) == ([4, 5, 7], [["1", " x "], ["2"], ["NA", "y"]])
    assert rows.values == {"w": ["x", None, "y"]} and rows.readable.tolist() == [True, False, True]
