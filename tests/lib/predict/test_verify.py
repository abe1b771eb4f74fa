"""Reading a prediction output back (`predict.verify`): the manifest checked against every shard first."""

from __future__ import annotations

import os

import numpy as np
import pytest
import synthetic

from estimator_lib.predict import PredictionError
from estimator_lib.predict.jsonl import RowFormatter
from estimator_lib.predict.origins import RecordOrigins
from estimator_lib.predict.shards import commit_rows, shard_name
from estimator_lib.predict.verify import read_predictions, verify_output
from estimator_lib.schema import KEY_FEATURE


def committed(directory: str) -> str:
    """Three regression rows "a", "b", "c" (values 1.0, 2.5, -3.0) in two shards."""
    host = {KEY_FEATURE: np.array([b"a", b"b", b"c"], object)}
    outputs = {"predictions": np.float32([[1.0], [2.5], [-3.0]])}
    formatter = RowFormatter(synthetic.make_schema("regression"), (), RecordOrigins(["x"], [3]))
    commit_rows(iter([(host, outputs)]), formatter, 3, directory, 2, {"inputs": ["x"]})
    return directory


def test_rows_come_back_in_input_order_after_the_manifest_is_checked(tmp_path):
    out = committed(str(tmp_path / "out"))
    assert read_predictions(out) == [
        {"key": "a", "file": "x", "record": 0, "value": 1.0},
        {"key": "b", "file": "x", "record": 1, "value": 2.5},
        {"key": "c", "file": "x", "record": 2, "value": -3.0},
    ]
    manifest = verify_output(out)
    assert manifest["count"] == 3 and [s["rows"] for s in manifest["shards"]] == [2, 1]


@pytest.mark.parametrize(
    "changed",
    [
        b'{"key": "a", "value": 1.0}\n{"key": "b", "value": 2.6}\n',  # same rows, other bytes
        b'{"key": "a", "value": 1.0}\n',  # a row lost
    ],
)
def test_a_shard_that_differs_from_its_manifest_entry_is_refused(tmp_path, changed):
    out = committed(str(tmp_path / "out"))
    with open(os.path.join(out, shard_name(0, 2)), "wb") as f:
        f.write(changed)
    with pytest.raises(PredictionError, match=r"shard predictions-00000-of-00002.jsonl of .* does not match"):
        read_predictions(out)


def test_a_directory_without_a_committed_output_is_refused_naming_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"holds no committed prediction output; run batch prediction"):
        verify_output(str(tmp_path / "nothing"))
