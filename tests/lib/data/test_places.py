"""The eval rows' input file and line, recorded by prepare and found by key: checked against the input itself."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib.config import PrepareConfig
from estimator_lib.data import places
from estimator_lib.data.common import derived_key, hash64
from estimator_lib.data.prepare import prepare
from estimator_lib.schema import KEY_FEATURE


def _write(path, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["id", "x", "colour", "label"])
        writer.writerows(rows)
    return str(path)


def _rows(n, start, unique_ids):
    """Rows whose values repeat every 7 rows in the second file (without unique ids, whole rows repeat: derived
    keys then need the occurrence), with a quoted value holding a line break every 13 rows in the first (a row's
    line is not its index)."""
    out = []
    for i in range(start, start + n):
        j = i % 7 if start else i
        colour = "red\nish" if i % 13 == 0 and not start else ("red", "green", "blue")[j % 3]
        out.append([f"id{i}" if unique_ids else f"id{j}", f"{j * 0.5:.1f}", colour, "yes" if j % 2 else "no"])
    return out


def _lines(path):
    """{line number: row} of a CSV file, as the csv module reads it (a record's first line)."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        out, line = {}, 1
        for record in reader:
            out[line] = record
            line = reader.line_num + 1
    return out


def _eval_records(prepared):
    """(key, x, colour) of every prepared eval record."""
    out = []
    for path in tf.io.gfile.glob(prepared.files("eval")):
        for raw in tf.data.TFRecordDataset(path):
            example = tf.train.Example.FromString(raw.numpy())
            feature = example.features.feature
            x = prepared.schema.feature("x").key
            colour = prepared.schema.feature("colour").key
            out.append(
                (
                    feature[KEY_FEATURE].bytes_list.value[0].decode(),
                    feature[x].float_list.value[0],
                    feature[colour].bytes_list.value[0].decode(),
                )
            )
    return out


@pytest.mark.parametrize("key_column", [None, "id"])
def test_every_eval_row_is_found_on_its_input_line(tmp_path, key_column):
    unique = key_column is not None
    files = [_write(tmp_path / "a.csv", _rows(60, 0, unique)), _write(tmp_path / "b.csv", _rows(60, 100, unique))]
    config = PrepareConfig(data=tuple(files), label="label", eval_fraction=0.3, key_column=key_column, num_workers=1)
    prepared = prepare(config, str(tmp_path / "out"))
    table = places.read_places(prepared.output_dir)
    names = [d["name"] for d in prepared.manifest["inputs"]]
    lines = {name: _lines(path) for name, path in zip(names, files)}
    records = _eval_records(prepared)
    assert len(records) == prepared.counts["eval"] > 20
    placed = [places.place_of(table, key, key_column is not None, names) for key, _, _ in records]
    for (key, x, colour), (name, line) in zip(records, placed):
        row = lines[name][line]
        assert (float(row[1]), row[2]) == (pytest.approx(x), colour), (key, name, line)
        assert row[0] == key or key_column is None
    assert len(set(placed)) == len(records) and {name for name, _ in placed} == {"a.csv", "b.csv"}
    if key_column is None:  # whole rows repeat in b.csv: identical rows told apart by their occurrence
        from_b = [(x, colour) for (_, x, colour), (name, _) in zip(records, placed) if name == "b.csv"]
        assert len(set(from_b)) < len(from_b)
    else:  # a.csv's row i is on line 2 + i + the two-line rows before it
        in_a = [(int(key[2:]), line) for (key, _, _), (name, line) in zip(records, placed) if name == "a.csv"]
        assert all(line == 2 + i + sum(1 for k in range(i) if k % 13 == 0) for i, line in in_a)
        assert any(line != 2 + i for i, line in in_a)


def test_a_key_without_an_entry_has_no_source():
    hashes = np.array([hash64("k1"), hash64("k2"), 5], dtype=np.uint64)
    table = places.split_places(
        hashes, np.array([True, True, False]), np.array([2, 3, 4], np.uint32), [0, 2], (1.0, 0.0, 0.0)
    )
    assert table.tolist() == sorted([(hash64("k1"), 0, 2), (hash64("k2"), 0, 3)])  # the unreadable row left out
    assert places.place_of(table, "k2", True, ["a.csv"]) == ("a.csv", 3)
    assert places.place_of(table, "k3", True, ["a.csv"]) is None
    assert places.place_of(table, derived_key(hash64("k1"), 1), False, ["a.csv"]) is None  # one occurrence only
    assert places.place_of(table, "not-a-derived-key", False, ["a.csv"]) is None


def test_a_dataset_prepared_before_places_were_recorded_has_none(tmp_path):
    assert places.read_places(str(tmp_path)) is None
