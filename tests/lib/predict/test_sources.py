"""What batch prediction scores (`predict.sources`): a prepared split with its count, raw rows, TFRecords by
file or directory (checked against the schema), and the preparation's row rules for raw rows. A
`PrepareResult` is built by hand around tiny real TFRecords; scoring each source end to end is in
test_scoring.py."""

from __future__ import annotations

import os

import pytest
import synthetic

from estimator_lib.data.prepare import PrepareResult
from estimator_lib.predict.sources import PredictionSource, encoded_rows_uri, prediction_source, scoring_options

SCHEMA = synthetic.make_schema("multiclass")


def prepared(output_dir: str = "gs://b/prepared") -> PrepareResult:
    config = {"missing_values": ["", "NA"], "bad_rows": "quarantine", "max_bad_fraction": 0.05}
    return PrepareResult(output_dir, SCHEMA, {"train": 90, "eval": 7}, {"config": config})


def test_a_split_name_gives_its_files_and_the_manifests_count():
    assert prediction_source("eval", prepared()) == PredictionSource(
        "gs://b/prepared/eval/part-*.tfrecord", count=7, split="eval"
    )


@pytest.mark.parametrize("data", ["gs://b/new/*.csv", "rows.jsonl.gz"])
def test_raw_rows_are_scored_through_the_schema_uncounted(data):
    assert prediction_source(data, prepared()) == PredictionSource(data, raw=True, count=None)


def test_tfrecords_by_pattern_or_directory_are_checked_and_left_uncounted(tmp_path):
    pattern, _ = synthetic.write_dataset(
        str(tmp_path / "rows"), synthetic.make_rows(4, seed=1, task="multiclass"), SCHEMA
    )

    assert prediction_source(pattern, prepared()) == PredictionSource(pattern)
    for directory in (str(tmp_path / "rows"), str(tmp_path / "rows") + "/"):
        assert prediction_source(directory, prepared()) == PredictionSource(
            os.path.join(tmp_path, "rows", "*.tfrecord")
        )


def test_empty_directory_is_refused_with_the_accepted_inputs(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        prediction_source(str(tmp_path), prepared=None)
    assert str(error.value) == (
        f"predict_data={str(tmp_path)!r} names no file type and holds no .tfrecord or .tfrecords or .tf_record or "
        ".tfrec files; give CSV / "
        "JSON Lines files (.csv, .jsonl, .json, .ndjson), TFRecord files, or a directory of TFRecords"
    )


def test_raw_rows_are_read_with_the_preparations_rules_and_encoded_beside_the_predictions():
    assert scoring_options(prepared()) == {
        "missing_values": ("", "NA"),
        "bad_rows": "quarantine",
        "max_bad_fraction": 0.05,
    }
    assert encoded_rows_uri("gs://b/predictions/") == "gs://b/predictions-rows"
    assert encoded_rows_uri("/out/p") == "/out/p-rows"
