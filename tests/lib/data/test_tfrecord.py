"""Records framed by `tfrecord.frame` are the bytes tf.io.TFRecordWriter writes, and read back with TensorFlow."""

from __future__ import annotations

import os

import tensorflow as tf

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
