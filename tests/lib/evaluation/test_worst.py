"""The worst-predicted eval rows: each row's loss, the worst first, their original values read back from the
records in the records' order, and their input lines."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import synthetic

from estimator_lib.data import places
from estimator_lib.data.common import hash64
from estimator_lib.evaluation import Scores, Truth, read_truth
from estimator_lib.evaluation.worst import row_losses, worst_rows


def test_a_rows_loss_is_its_log_loss_or_its_absolute_error():
    truth = Truth(("a", "b", "c"), np.array(["no", "yes", "yes"], dtype=object), ("no", "yes"))
    probabilities = np.array([[0.8, 0.2], [0.5, 0.5], [1.0, 0.0]])
    losses = row_losses(truth, Scores(np.array(["no", "no", "no"], dtype=object), probabilities))
    assert losses.tolist() == [
        pytest.approx(-math.log(0.8)),
        pytest.approx(math.log(2)),
        pytest.approx(-math.log(1e-15)),
    ]
    regression = Truth(("a", "b"), np.array([1.0, 4.0]))
    assert row_losses(regression, Scores(np.array([1.5, 2.0]))).tolist() == [0.5, 2.0]


def test_the_worst_rows_come_with_their_values_and_lines(tmp_path):
    schema = synthetic.make_schema("regression")
    rows = synthetic.make_rows(30, 5, "regression")
    files, _ = synthetic.write_dataset(str(tmp_path / "eval"), rows, schema, shards=3)
    truth = read_truth(files, schema)  # the records' order: shard by shard
    order = [int(key.split("-")[1]) for key in truth.keys]
    actual = np.array([rows[i]["target"] for i in order])
    error = np.zeros(30)
    error[[order.index(7), order.index(21), order.index(16)]] = [9.0, 5.0, 3.0]  # rows 7, 21, 16 worst
    scores = Scores(actual + error)
    table = np.array([(hash64("row-21"), 0, 23)], dtype=places.DTYPE)
    schema = dataclasses.replace(schema, key_column="id")  # the keys are a key column's values
    worst = worst_rows(truth, scores, schema, files, table, ["data.csv"], count=3)
    assert [row["key"] for row in worst] == ["row-7", "row-21", "row-16"]
    assert [row["loss"] for row in worst] == [pytest.approx(9.0), pytest.approx(5.0), pytest.approx(3.0)]
    assert [row["source"] for row in worst] == [None, {"file": "data.csv", "line": 23}, None]
    first = worst[0]
    assert first["label"] == pytest.approx(rows[7]["target"]) and first["probability"] is None
    assert first["values"]["colour"] == rows[7]["colour"]
    assert first["values"]["x 1"] == pytest.approx(rows[7]["x 1"], rel=1e-6)
    missing = [i for i, row in enumerate(rows) if row["x-2"] is None]
    assert missing == [0, 17]  # make_rows leaves x-2 out every 17 rows
    again = worst_rows(truth, Scores(actual + (np.array(order) == 17) * 4.0), schema, files, None, [], count=1)
    assert again[0]["key"] == "row-17" and again[0]["values"]["x-2"] is None and again[0]["source"] is None
