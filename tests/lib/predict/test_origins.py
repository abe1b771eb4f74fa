"""A prediction row's origin (`predict.origins`): its input file and line, or TFRecord file and record index.

Raw CSV rows (a header, a quoted value over two lines, a quarantined bad row) and a prepared split are scored with
the linear model test_scoring trains, and each row's file and line are checked against the CSV text itself.
"""

from __future__ import annotations

import csv
import re
from typing import Dict

import numpy as np
import pytest
import tensorflow as tf
from test_scoring import FEATURES, make_rows, trained, write_csv  # noqa: F401  (the `trained` fixture)

from estimator_lib.data import places
from estimator_lib.data import records as records_module
from estimator_lib.data.common import DataError, hash64
from estimator_lib.data.records import file_records
from estimator_lib.model import inputs
from estimator_lib.predict import read_predictions, sources
from estimator_lib.predict.batch import predict_raw
from estimator_lib.predict.origins import KeyedOrigins, RecordOrigins


def csv_lines(path: str) -> Dict[str, int]:
    """{id: the line its record starts on} of a CSV file, as the csv module reads it (the header is line 1)."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        out, line = {}, 1
        for record in reader:
            out[record[0]] = line
            line = reader.line_num + 1
    return out


def origins_of(rows) -> list:
    return [(row["key"], row["file"], row["line"]) for row in rows]


def test_record_origins_count_records_per_file_across_file_ends():
    origins = RecordOrigins(["a.tfrecord", "dir/b.tfrecord", "c.tfrecord"], [2, 0, 3])
    files, records = origins.texts(np.array([b"k"] * 4, object), first_row=1)
    assert files == [b'"a.tfrecord"', b'"c.tfrecord"', b'"c.tfrecord"', b'"c.tfrecord"']
    assert records == [b"1", b"0", b"1", b"2"]
    assert origins.texts(np.array([b"k"], object), first_row=5) == ([b"null"], [b"null"])  # past the input
    assert origins.count == 5 and origins.field == "record"


def tf_data_count(path: str) -> int:
    """The records tf.data reads from `path` (which checks every record's CRCs)."""
    return sum(1 for _ in tf.data.TFRecordDataset(path))


@pytest.mark.parametrize("read_bytes", [7, 64, records_module._READ_BYTES])
def test_file_records_counts_from_the_framing_across_read_chunks(tmp_path, monkeypatch, read_bytes):
    monkeypatch.setattr(records_module, "_READ_BYTES", read_bytes)  # records and lengths cut across reads
    for name, sizes in (("none", []), ("empty-records", [0, 0]), ("mixed", [5, 0, 100, 3, 70])):
        path = str(tmp_path / f"{name}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for size in sizes:
                writer.write(b"x" * size)
        assert file_records(path) == len(sizes) == tf_data_count(path) == inputs.count_records([path])


def test_file_records_names_a_truncated_file_and_its_last_record(tmp_path):
    path = str(tmp_path / "cut.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"x" * 5)  # bytes [0, 21)
        writer.write(b"y" * 100)  # bytes [21, 137)
    data = open(path, "rb").read()
    for cut in (100, 33):  # inside the second record's data; right after its 12-byte header
        open(path, "wb").write(data[:cut])
        with pytest.raises(
            DataError, match=rf"^{re.escape(path)}: corrupt or truncated TFRecord \(.*truncated record at 21"
        ):
            file_records(path)
    for cut in (25, 32):  # too few bytes for a header after the first record: TensorFlow reads one record
        open(path, "wb").write(data[:cut])
        assert file_records(path) == 1 == tf_data_count(path)


def test_keyed_origins_place_known_keys_and_leave_others_null():
    hashes = np.array([hash64("k1"), hash64("k2"), hash64("k3")], np.uint64)
    table = places.input_places(hashes, np.array([True, True, False]), np.uint32([2, 9, 12]), [0, 1])
    origins = KeyedOrigins(table, ["a.csv", 'b "x".csv'], key_column=True)
    files, lines = origins.texts(np.array([b"k2", b"k1", b"k3", b"other"], object), first_row=0)
    assert files == [b'"b \\"x\\".csv"', b'"a.csv"', b"null", b"null"]  # k3's row was unreadable: no entry
    assert lines == [b"9", b"2", b"null", b"null"]
    unplaced = KeyedOrigins(None, ["a.csv"], key_column=True)  # prepared before places were recorded
    assert unplaced.texts(np.array([b"k1"], object), 0) == ([b"null"], [b"null"])


def test_raw_rows_carry_their_csv_line_past_a_header_a_two_line_value_and_a_bad_row(trained, tmp_path):  # noqa: F811
    first, second = make_rows(6, seed=31), make_rows(4, seed=32, first_id=100)
    first[1]["colour"] = "red\nish"  # a quoted value over two lines: later rows' lines are not their index + 2
    first[3]["x-2"] = "inf"  # a bad row, quarantined: no prediction row, and the next keeps its own line
    columns = ("id",) + FEATURES
    paths = [write_csv(str(tmp_path / "a.csv"), first, columns), write_csv(str(tmp_path / "b.csv"), second, columns)]
    out = str(tmp_path / "out")

    predict_raw(
        trained["job"], trained["schema"], trained["model_dir"], paths, out, bad_rows="quarantine", max_bad_fraction=0.2
    )

    lines = {name: csv_lines(path) for name, path in zip(("a.csv", "b.csv"), paths)}
    expected = [(r["id"], "a.csv", lines["a.csv"][r["id"]]) for i, r in enumerate(first) if i != 3]
    expected += [(r["id"], "b.csv", lines["b.csv"][r["id"]]) for r in second]
    rows = read_predictions(out)
    assert origins_of(rows) == expected
    assert [line for _, name, line in expected if name == "a.csv"] == [2, 3, 5, 7, 8]
    assert list(rows[0])[:3] == ["key", "file", "line"]


def test_a_prepared_split_carries_each_rows_input_line(trained, tmp_path):  # noqa: F811
    prepared = trained["prepared"]  # data.csv: the row with id "id-i" on line i + 2
    result = sources.score(trained["job"], prepared, trained["model_dir"], "train", str(tmp_path / "out"))
    rows = read_predictions(result.output_dir)
    assert len(rows) == prepared.counts["train"] > 50
    assert origins_of(rows) == [(r["key"], "data.csv", int(r["key"][3:]) + 2) for r in rows]
    assert result.manifest["fields"][:3] == ["key", "file", "line"]


def test_each_split_has_its_places_and_the_dataset_fingerprint_covers_them(trained):  # noqa: F811
    prepared = trained["prepared"]
    written = [split for split, count in prepared.counts.items() if count]
    assert {"train", "eval"} <= set(written)
    for split in written:
        assert len(places.read_places(prepared.output_dir, split)) == prepared.counts[split]  # no bad rows here
        assert places.places_file(split) in prepared.manifest["outputs"]
