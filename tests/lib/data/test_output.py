"""data/output.py: key-hash and consecutive TFRecord shards (read back by TensorFlow), the quarantine file,
and the output files' fingerprints."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from estimator_lib.data import output
from estimator_lib.data.tfrecord import frame


def read_records(path: str) -> list:
    return [r.numpy() for r in tf.data.TFRecordDataset(path)]


def records(prefix: str, n: int, start: int = 0) -> list:
    return [f"{prefix}{i}".encode() for i in range(start, start + n)]


def test_shard_names():
    assert output.shard_name("train", 3, 12) == "train/part-00003-of-00012.tfrecord"
    assert output.scoring_shard_name(0, 2) == "part-00000-of-00002.tfrecord"


# Key hashes whose low 32 bits put them in shard 0 or 1 of 2 (the high bits, which pick the split, vary).
LOW, HIGH = 0x12345678_00000001, 0xFEDCBA98_80000000


def test_shard_of_scales_the_low_32_bits_to_the_shard_count():
    hashes = np.array([0, 0xFFFFFFFF, LOW, HIGH, 0xFFFFFFFF_7FFFFFFF, 2**64 - 1], np.uint64)
    assert output.shard_of(hashes, 2).tolist() == [0, 1, 0, 1, 0, 1]
    assert output.shard_of(hashes, 3).tolist() == [0, 2, 0, 1, 1, 2]
    assert output.shard_of(hashes, 1).tolist() == [0] * 6
    spread = np.bincount(output.shard_of(np.random.default_rng(0).integers(0, 2**63, 10_000, np.uint64), 4))
    assert spread.min() > 2_300


def test_shard_writers_put_rows_in_their_key_hash_shard_in_input_order(tmp_path):
    writers = output.ShardWriters(str(tmp_path), ["train", "eval"], num_shards=2)
    writers.write("train", frame(records("t", 3)), np.array([HIGH, LOW, HIGH], np.uint64))
    writers.write("train", frame(records("t", 2, start=3)), np.array([HIGH, HIGH], np.uint64))
    writers.write("eval", frame([b"e0"]), np.array([LOW], np.uint64))
    writers.close()
    assert writers.names["train"] == ["train/part-00000-of-00002.tfrecord", "train/part-00001-of-00002.tfrecord"]
    assert read_records(str(tmp_path / writers.names["train"][0])) == [b"t1"]
    assert read_records(str(tmp_path / writers.names["train"][1])) == [b"t0", b"t2", b"t3", b"t4"]
    assert read_records(str(tmp_path / writers.names["eval"][0])) == [b"e0"]
    assert os.path.getsize(tmp_path / writers.names["eval"][1]) == 0  # an empty shard still exists
    assert writers.records == {
        "train/part-00000-of-00002.tfrecord": 1,
        "train/part-00001-of-00002.tfrecord": 4,
        "eval/part-00000-of-00002.tfrecord": 1,
        "eval/part-00001-of-00002.tfrecord": 0,
    }


def test_consecutive_shards_hold_ranges_in_input_order(tmp_path):
    shards = output.ConsecutiveShards(str(tmp_path), "score", num_shards=2, planned_rows=5)
    shards.write("score", frame(records("r", 2)))
    shards.write("score", frame(records("r", 4, start=2)))  # one row more than planned: it joins the last shard
    shards.close()
    first, second = (read_records(str(tmp_path / name)) for name in shards.names)
    assert first == [b"r0", b"r1", b"r2"] and second == [b"r3", b"r4", b"r5"]
    assert shards.records == {"part-00000-of-00002.tfrecord": 3, "part-00001-of-00002.tfrecord": 3}


def test_consecutive_shards_refuse_another_split_and_zero_planned_rows(tmp_path):
    shards = output.ConsecutiveShards(str(tmp_path), "score", num_shards=3, planned_rows=0)
    with pytest.raises(AssertionError, match="scoring rows must all land in split 'score', got one for 'train'"):
        shards.write("train", frame([b"x"]))
    shards.write("score", frame([b"a", b"b"]))  # planned 0 is taken as 1: everything lands in the last shard
    shards.close()
    assert list(shards.records.values()) == [1, 0, 1]


def test_a_json_lines_file_is_written_only_when_a_row_comes(tmp_path):
    empty = output.JsonLinesWriter(str(tmp_path / "a"), output.QUARANTINE)
    empty.close()
    assert not os.path.exists(empty.path)
    os.makedirs(tmp_path / "b")
    writer = output.JsonLinesWriter(str(tmp_path / "b"), output.QUARANTINE)
    writer.write({"line": 3, "value": "ü", "file": "in.csv"})
    writer.write({"line": 9, "value": None, "file": "in.csv"})
    writer.close()
    with open(writer.path, encoding="utf-8") as f:
        assert f.read() == (
            '{"file": "in.csv", "line": 3, "value": "ü"}\n{"file": "in.csv", "line": 9, "value": null}\n'
        )
    assert writer.path == os.path.join(str(tmp_path / "b"), "quarantine.jsonl")


def test_fingerprints_cover_every_file_with_record_counts(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "part.tfrecord").write_bytes(b"abc")
    (tmp_path / "schema.json").write_bytes(b"")
    out = output.output_fingerprints(str(tmp_path), {"train/part.tfrecord": 7, "missing.tfrecord": 1})
    assert list(out) == ["schema.json", "train/part.tfrecord"]
    assert out["train/part.tfrecord"] == {"sha256": hashlib.sha256(b"abc").hexdigest(), "bytes": 3, "records": 7}
    assert out["schema.json"] == {"sha256": hashlib.sha256(b"").hexdigest(), "bytes": 0}
    assert output.output_fingerprints(str(tmp_path / "train"), {}) == {
        "part.tfrecord": {"sha256": hashlib.sha256(b"abc").hexdigest(), "bytes": 3}
    }


def test_write_json_is_sorted_indented_and_newline_terminated(tmp_path):
    path = str(tmp_path / "m.json")
    output.write_json(path, {"z": 1, "a": {"é": True}})
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    assert text == '{\n  "a": {\n    "é": true\n  },\n  "z": 1\n}\n'
    assert json.loads(text) == {"z": 1, "a": {"é": True}}
