"""`estimator.train` and `evaluate` refuse TFRecords prepared with another schema before the estimator starts,
naming the file, the record, the feature, what was expected and what was found; records that merely miss values
(prepared records leave a missing value out) are read as before. Real preparations of tiny tables."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from estimator_lib import estimator
from estimator_lib.config import JobConfig, PrepareConfig, TrainingConfig
from estimator_lib.data import prepare, records
from estimator_lib.data.common import EVAL, TRAIN, DataError
from estimator_lib.model import inputs

COLOURS = ("red", "green", "blue")
ANOTHER_SCHEMA = (
    "; these are probably TFRecords prepared with another schema: use the schema they were prepared with, or "
    "prepare the rows again with this one (PrepareConfig.schema_uri)"
)
JOB = JobConfig(training=TrainingConfig(train_steps=2))


def prepared_table(root, name: str, header: list[str], row) -> prepare.PrepareResult:
    """Prepares 60 rows (`row(i)` gives row i's values for `header`; the label column is "y")."""
    path = root / f"{name}.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(row(i) for i in range(60))
    config = PrepareConfig(data=(str(path),), label="y", num_workers=1, num_shards=2)
    return prepare.prepare(config, str(root / name))


def ours_row(i: int) -> list:
    return [i * 0.5, (i % 7) - 3.0, COLOURS[i % 3], "yes" if i % 2 else "no"]


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """The model's preparation: numerics "a" and "b", categorical "colour", label "y"."""
    return prepared_table(tmp_path_factory.mktemp("ours"), "ours", ["a", "b", "colour", "y"], ours_row)


def first_file(prepared: prepare.PrepareResult, split: str) -> str:
    return inputs.resolve_files(prepared.files(split))[0]


def test_train_refuses_records_with_a_renamed_column_before_the_estimator_starts(ours, tmp_path):
    renamed = prepared_table(tmp_path, "renamed", ["a", "b2", "colour", "y"], ours_row)
    model_dir = tmp_path / "model"
    with pytest.raises(DataError) as raised:
        estimator.train(JOB, ours.schema, renamed.files(TRAIN), str(model_dir))
    assert str(raised.value) == (
        f"{first_file(renamed, TRAIN)}: record 0: feature 'b' (key 'f_b'): expected 1 float value in float_list, "
        "found no such feature in the record (the record holds key(s) ['f_b2'], which the schema does not know)"
        + ANOTHER_SCHEMA
    )
    assert not model_dir.exists()  # no checkpoint, no graph: nothing was trained on imputed values


def test_train_prepared_refuses_a_preparation_whose_schema_is_not_the_model_s(ours, tmp_path):
    renamed = prepared_table(tmp_path, "renamed", ["a", "b2", "colour", "y"], ours_row)
    other = prepare.PrepareResult(renamed.output_dir, ours.schema, renamed.counts, renamed.manifest)
    with pytest.raises(DataError) as raised:
        estimator.train_prepared(JOB, other, str(tmp_path / "model"))
    assert str(raised.value).startswith(f"{first_file(renamed, TRAIN)}: record 0: feature 'b' (key 'f_b'): expected")


def test_evaluate_refuses_a_feature_of_another_type(ours, tmp_path):
    measured = lambda i: [*ours_row(i)[:2], i * 0.25, ours_row(i)[3]]  # noqa: E731 - "colour" holds numbers here
    numbered = prepared_table(tmp_path, "numbered", ["a", "b", "colour", "y"], measured)
    with pytest.raises(DataError) as raised:
        estimator.evaluate(JOB, ours.schema, numbered.files(EVAL), str(tmp_path / "model"))
    assert str(raised.value) == (
        f"{first_file(numbered, EVAL)}: record 0: feature 'colour' (key 'f_colour'): expected 1 string value in "
        "bytes_list, found 1 float value(s) in float_list" + ANOTHER_SCHEMA
    )


def test_train_refuses_records_that_never_hold_a_feature_the_training_split_always_had(ours, tmp_path):
    dropped = prepared_table(tmp_path, "dropped", ["a", "colour", "y"], lambda i: [ours_row(i)[0], *ours_row(i)[2:]])
    with pytest.raises(DataError) as raised:
        estimator.train(JOB, ours.schema, dropped.files(TRAIN), str(tmp_path / "model"))
    assert str(raised.value) == (
        f"{first_file(dropped, TRAIN)}: record 0: feature 'b' (key 'f_b'): expected 1 float value in float_list, "
        f"found no such feature in the record, nor in any of the first {dropped.counts[TRAIN]} records of the 2 "
        "file(s), though the schema's training split had a value in every row" + ANOTHER_SCHEMA
    )


def test_evaluate_refuses_records_without_the_label(ours, tmp_path):
    path = str(tmp_path / "unlabelled.tfrecord")
    row = dict(zip(["a", "b", "colour"], ours_row(0)))
    records.write_tfrecord(path, [records.encode_example(row, ours.schema, key="r0", with_label=False)])
    with pytest.raises(DataError) as raised:
        estimator.evaluate(JOB, ours.schema, path, str(tmp_path / "model"))
    assert str(raised.value) == (
        f"{path}: record 0: label 'y' (key 'label'): expected 1 int64 value in int64_list, found no such feature "
        "in the record" + ANOTHER_SCHEMA
    )


def write_rows(path, rows: list[dict], schema) -> str:
    """The rows as the library encodes them (a missing value, None, is left out of its record)."""
    records.write_tfrecord(str(path), [records.encode_example(row, schema, key=f"r{i}") for i, row in enumerate(rows)])
    return str(path)


def rows_without_b(count: int) -> list[dict]:
    return [{**dict(zip(["a", "b", "colour", "y"], ours_row(i))), "b": None} for i in range(count)]


def test_a_first_record_that_misses_a_value_is_read_as_before(ours, tmp_path):
    """Prepared records leave a missing value out: a feature the first record lacks and a later one holds is
    one."""
    rows = [dict(zip(["a", "b", "colour", "y"], ours_row(i))) for i in range(3)]
    rows[0]["b"] = None
    path = write_rows(tmp_path / "missing.tfrecord", rows, ours.schema)
    assert inputs.eval_input_fn_builder(path, ours.schema).num_examples == 3


def test_a_feature_no_record_holds_is_refused_only_when_the_training_split_always_had_it(ours, tmp_path):
    path = write_rows(tmp_path / "no-b.tfrecord", rows_without_b(2), ours.schema)
    with pytest.raises(DataError, match=r"nor in any of the first 2 records of the 1 file\(s\), though the schema's"):
        inputs.eval_input_fn_builder(path, ours.schema)
    features = [dataclasses.replace(f, missing_count=4) if f.name == "b" else f for f in ours.schema.features]
    sometimes_missing = dataclasses.replace(ours.schema, features=tuple(features))
    assert inputs.eval_input_fn_builder(path, sometimes_missing).num_examples == 2
