"""The prediction output on disk (`predict.shards`): shard names and sizes, pieces cut at shard ends, exact
shard bytes with their manifest entries, and nothing published when the rows do not match the plan."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
import synthetic

from estimator_lib import storage
from estimator_lib.predict import PredictionError
from estimator_lib.predict import shards as shards_module
from estimator_lib.predict.jsonl import RowFormatter
from estimator_lib.predict.origins import RecordOrigins
from estimator_lib.predict.shards import (
    check_num_shards,
    commit_rows,
    formatted_pieces,
    publish,
    shard_name,
    shard_sizes,
)
from estimator_lib.schema import KEY_FEATURE

FORMATTER = RowFormatter(synthetic.make_schema("regression"), (), RecordOrigins(["a.tfrecord", "b.tfrecord"], [3, 4]))


def batch(first: int, n: int):
    """Rows first..first+n-1: key "r<i>", value i + 0.5."""
    keys = np.array([f"r{i}".encode() for i in range(first, first + n)], object)
    return {KEY_FEATURE: keys}, {"predictions": np.float32(np.arange(first, first + n) + 0.5)[:, None]}


def lines(first: int, n: int) -> bytes:
    """Rows first..first+n-1 as FORMATTER writes them: row i is record i of a.tfrecord, then of b.tfrecord."""
    return b"".join(
        b'{"key": "r%d", "file": "%s.tfrecord", "record": %d, "value": %d.5}\n'
        % (i, b"a" if i < 3 else b"b", i if i < 3 else i - 3, i)
        for i in range(first, first + n)
    )


def test_shard_names_sort_in_row_order_and_sizes_differ_by_at_most_one():
    assert shard_name(2, 10) == "predictions-00002-of-00010.jsonl"
    assert shard_sizes(7, 3) == [3, 2, 2]
    assert shard_sizes(2, 4) == [1, 1, 0, 0]
    assert shard_sizes(0, 1) == [0]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_num_shards_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match=rf"^num_shards={bad!r} must be a positive integer, e.g. 1$"):
        check_num_shards(bad)


def test_pieces_are_cut_at_shard_ends_and_every_format_rows_rows(monkeypatch):
    host, outputs = batch(1, 4)  # rows 1..4 of shards [0, 3) and [3, 5)
    pieces = list(formatted_pieces(host, outputs, FORMATTER, first_row=1, ends=[3, 5]))
    assert pieces == [(0, 2, lines(1, 2)), (1, 2, lines(3, 2))]

    monkeypatch.setattr(shards_module, "FORMAT_ROWS", 1)
    pieces = list(formatted_pieces(host, outputs, FORMATTER, first_row=1, ends=[3, 5]))
    assert pieces == [(0, 1, lines(1, 1)), (0, 1, lines(2, 1)), (1, 1, lines(3, 1)), (1, 1, lines(4, 1))]

    with pytest.raises(PredictionError, match=r"more rows than the 5 planned ones arrived"):
        list(formatted_pieces(host, outputs, FORMATTER, first_row=2, ends=[3, 5]))


def test_rows_in_uneven_batches_make_exact_shards_and_manifest(tmp_path):
    out = str(tmp_path / "out")
    joined = iter([batch(0, 4), batch(4, 1), batch(5, 2)])

    result = commit_rows(joined, FORMATTER, 7, out, 3, {"source": {"kind": "test"}})

    names = [shard_name(i, 3) for i in range(3)]
    data = [lines(0, 3), lines(3, 2), lines(5, 2)]
    assert [open(os.path.join(out, n), "rb").read() for n in names] == data
    assert result.count == 7 and result.shards == tuple(os.path.join(out, n) for n in names)
    assert result.manifest == {
        "source": {"kind": "test"},
        "format": "jsonl",
        "count": 7,
        "num_shards": 3,
        "fields": ["key", "file", "record", "value"],
        "shards": [
            {"file": n, "rows": r, "bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()}
            for n, r, d in zip(names, [3, 2, 2], data)
        ],
    }
    assert json.load(open(os.path.join(out, "manifest.json"))) == result.manifest
    assert sorted(os.listdir(out)) == sorted(names + ["_COMMITTED", "manifest.json"])


def test_more_shards_than_rows_are_written_empty(tmp_path):
    result = commit_rows(iter([batch(0, 1)]), FORMATTER, 1, str(tmp_path / "out"), 3, {})
    assert [(s["rows"], s["bytes"]) for s in result.manifest["shards"]] == [(1, len(lines(0, 1))), (0, 0), (0, 0)]
    assert result.manifest["shards"][2]["sha256"] == hashlib.sha256(b"").hexdigest()


def test_fewer_rows_than_planned_publish_nothing_and_keep_the_previous_output(tmp_path):
    out = str(tmp_path / "out")
    commit_rows(iter([batch(0, 2)]), FORMATTER, 2, out, 1, {"run": 1})

    with pytest.raises(PredictionError, match=r"^shard 1 is 1 row\(s\) short of its planned size$"):
        commit_rows(iter([batch(0, 3)]), FORMATTER, 4, out, 2, {"run": 2})

    assert json.load(open(os.path.join(out, "manifest.json")))["run"] == 1
    assert sorted(os.listdir(tmp_path)) == ["out"]  # the staging directory was removed


def test_publish_writes_the_manifest_beside_what_write_shards_wrote(tmp_path):
    def write_shards(staging):
        storage.write_bytes(os.path.join(staging, shard_name(0, 1)), b"{}\n")
        return [{"file": shard_name(0, 1), "rows": 1, "bytes": 3, "sha256": "x"}]

    result = publish(write_shards, ("key",), str(tmp_path / "out"), 1, {"inputs": ["a"]})

    assert result.count == 1 and storage.is_committed(str(tmp_path / "out"))
    assert result.manifest["inputs"] == ["a"] and result.manifest["fields"] == ["key"]
