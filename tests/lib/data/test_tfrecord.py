"""Records framed by `tfrecord.frame` are the bytes tf.io.TFRecordWriter writes, and read back with TensorFlow."""

from __future__ import annotations

import os

import tensorflow as tf

from estimator_lib.data.records import first_records
from estimator_lib.data.tfrecord import frame


def test_framed_records_are_the_bytes_tensorflow_writes(tmp_path):
    records = [b"", b"x", os.urandom(127), os.urandom(128), os.urandom(70_000), b"\x00" * 300]
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    with open(path, "rb") as f:
        assert f.read() == b"".join(frame(records))
    ours = tmp_path / "ours.tfrecord"
    ours.write_bytes(b"".join(frame(records)))
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(ours))] == records
    assert frame([]) == []


def test_first_records_are_tensorflows_and_a_fault_is_left_to_its_reader(tmp_path):
    records = [b"", os.urandom(127), os.urandom(70_000), b"x"]
    path = tmp_path / "r.tfrecord"
    path.write_bytes(b"".join(frame(records)) + b"\x01\x02\x03")  # a tail too short for a header: the end
    assert first_records(str(path), 1) == records[:1]
    assert first_records(str(path), 3) == records[:3]
    assert first_records(str(path), 10) == records == [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    assert first_records(str(tmp_path / "empty.tfrecord"), 1) == []
    framed = b"".join(frame(records))
    for name, broken in {
        "data crc": framed[:12] + b"\xff" + framed[13:],  # record 0 is empty: this is its data's CRC
        "head crc": framed[:8] + b"\x00\x00\x00\x00" + framed[12:],
        "cut short": framed[: len(frame(records[:1])[0]) + 40],
    }.items():
        bad = tmp_path / f"{name}.tfrecord"
        bad.write_bytes(broken)
        assert first_records(str(bad), 3) is None, name
    # The first record alone still reads when a later one is cut short.
    assert first_records(str(tmp_path / "cut short.tfrecord"), 1) == records[:1]
