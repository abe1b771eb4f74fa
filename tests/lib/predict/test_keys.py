"""Joining predictions to keys (`predict.keys`): keys unpacked from the predictions while they fit, the records
read again from the predict batch holding the first long key (or from row 0 for passthrough columns), and a
host read that does not match the predictions refused."""

from __future__ import annotations

from typing import List

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib.data import example_keys, records
from estimator_lib.data.example_keys import KEY_BYTES_FEATURE
from estimator_lib.predict import PredictionError
from estimator_lib.predict.columns import passthrough_columns
from estimator_lib.predict.keys import KeyedRows, RowBuffer
from estimator_lib.schema import KEY_FEATURE

SCHEMA = synthetic.make_schema("multiclass")
B = 2  # predict batch size


def host_batch(keys: List[bytes]):
    return {
        KEY_FEATURE: np.array(keys, object),
        "x": (np.arange(len(keys), dtype=np.float32), np.ones(len(keys), bool)),
    }


def test_the_buffer_hands_out_rows_across_uneven_host_batches():
    buffer = RowBuffer(iter([host_batch([b"a", b"b", b"c"]), host_batch([b"d", b"e"])]))
    taken = [buffer.take(n) for n in (2, 2, 1)]
    assert [t[KEY_FEATURE].tolist() for t in taken] == [[b"a", b"b"], [b"c", b"d"], [b"e"]]
    assert [t["x"][0].tolist() for t in taken] == [[0.0, 1.0], [2.0, 0.0], [1.0]]
    buffer.assert_exhausted()


def test_the_buffer_refuses_a_host_read_longer_or_shorter_than_the_predictions():
    short = RowBuffer(iter([host_batch([b"a"])]))
    with pytest.raises(PredictionError, match=r"more real rows than the host pass read \(1 left, 2 needed\)"):
        short.take(2)
    long = RowBuffer(iter([host_batch([b"a", b"b"])]))
    long.take(1)
    with pytest.raises(PredictionError, match="the host pass read more rows than the model predicted"):
        long.assert_exhausted()


def write_keyed(path: str, keys: List[str]) -> List[str]:
    rows = synthetic.make_rows(len(keys), seed=2, task="multiclass")
    records.write_tfrecord(path, [records.encode_example(r, SCHEMA, key=k) for r, k in zip(rows, keys)])
    return [path]


def predictions(keys: List[str], sizes: List[int]):
    """The model's real rows in elements of `sizes` rows: class_ids 0.. and the packed keys."""
    packed = example_keys.encode(tf.constant([k.encode("utf-8") for k in keys])).numpy()
    ends = np.cumsum(sizes)
    for start, end in zip(ends - sizes, ends):
        yield {"class_ids": np.arange(start, end), KEY_BYTES_FEATURE: packed[start:end]}


def joined_keys(pieces) -> List[List[str]]:
    return [[k.decode("utf-8") for k in host[KEY_FEATURE].tolist()] for host, _ in pieces]


def test_keys_that_fit_come_from_the_predictions_without_reading_the_records(tmp_path):
    keys = ["k0", "k1", "k\0", "kl\u00ed\u010d"]
    keyed = KeyedRows([str(tmp_path / "never-read.tfrecord")], (), SCHEMA, B)

    pieces = list(keyed.join(predictions(keys, [2, 2])))

    assert joined_keys(pieces) == [["k0", "k1"], ["k\0", "kl\u00ed\u010d"]]
    assert [outputs["class_ids"].tolist() for _, outputs in pieces] == [[0, 1], [2, 3]]
    assert all(set(outputs) == {"class_ids"} for _, outputs in pieces)  # the packed keys are taken out
    assert keyed.report == {"from": "predictions", "records_read_again_from_row": None}


def test_a_long_key_switches_to_the_records_from_its_predict_batch_on(tmp_path):
    keys = ["k0", "k1", "k2", "long-" + "z" * 70, "k4"]
    keyed = KeyedRows(write_keyed(str(tmp_path / "rows.tfrecord"), keys), (), SCHEMA, B)

    pieces = list(keyed.join(predictions(keys, [5])))  # one element of several batches, as on CPU

    assert joined_keys(pieces) == [["k0", "k1"], ["k2", keys[3], "k4"]]
    assert [outputs["class_ids"].tolist() for _, outputs in pieces] == [[0, 1], [2, 3, 4]]
    assert keyed.report == {"from": "predictions, then records", "records_read_again_from_row": 2}


def test_passthrough_columns_come_from_the_records_from_the_first_row(tmp_path):
    keys = ["k0", "k1", "k2"]
    columns = passthrough_columns(SCHEMA, ["colour"])
    keyed = KeyedRows(write_keyed(str(tmp_path / "rows.tfrecord"), keys), columns, SCHEMA, B)

    pieces = list(keyed.join(predictions(keys, [2, 1])))

    assert joined_keys(pieces) == [["k0", "k1"], ["k2"]]
    colours = [r["colour"].encode() for r in synthetic.make_rows(3, seed=2, task="multiclass")]
    assert [c for host, _ in pieces for c in host["colour"][0].tolist()] == colours
    assert keyed.report == {"from": "records", "records_read_again_from_row": 0}


def test_records_that_hold_fewer_rows_than_the_predictions_fail(tmp_path):
    keyed = KeyedRows(write_keyed(str(tmp_path / "rows.tfrecord"), ["k0"]), (), SCHEMA, B)
    with pytest.raises(PredictionError, match="the input files changed while predicting"):
        list(keyed.join(predictions(["long-" + "z" * 70, "k1"], [2])))
