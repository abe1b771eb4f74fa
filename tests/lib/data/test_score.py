"""Scoring's own pieces: the key column, the column checks and their messages, the encode plan, the manifest."""

from __future__ import annotations

import pytest

from estimator_lib.config import ConfigError, PrepareConfig
from estimator_lib.data import score
from estimator_lib.data.common import DataError
from estimator_lib.data.profile import ColumnCounts, Profile
from estimator_lib.data.read import Chunk
from estimator_lib.data.stats import Totals
from estimator_lib.schema import CATEGORICAL, CLASSIFICATION, NUMERIC, FeatureSpec, LabelSpec, Schema

FEATURES = (
    FeatureSpec("bill (mm)", "f_bill_mm", NUMERIC, mean=40.0, std=5.0),
    FeatureSpec("island", "f_island", CATEGORICAL, value_type="string", vocabulary=("Biscoe", "Dream")),
)
SCHEMA = Schema(FEATURES, LabelSpec("species", CLASSIFICATION, classes=("Adelie", "Gentoo")), "id")
CONFIG = PrepareConfig(data=("new.csv",), label="species", key_column="id")


def test_the_key_column_is_the_schemas():
    assert score.key_column(SCHEMA, None) == "id" and score.key_column(SCHEMA, "id") == "id"
    assert score.key_column(Schema(FEATURES, SCHEMA.label), "row") == "row"
    with pytest.raises(ConfigError) as e:
        score.key_column(SCHEMA, "row")
    assert (
        str(e.value)
        == "key_column='row' differs from the schema's key column 'id'; score with key_column='id' (or None)"
    )


def test_a_csv_header_needs_every_feature_and_the_key():
    check = score.header_check(SCHEMA, "id")
    check(Chunk(0, "new.csv", "csv", 2, "1,2\n", ("id", "island", "bill (mm)", "other")))  # no label: fine
    with pytest.raises(DataError) as e:
        check(Chunk(0, "new.csv", "csv", 2, "1\n", ("island",)))
    assert str(e.value) == (
        "new.csv line 1: column(s) ['bill (mm)', 'id'] are missing: scoring needs every feature column of the "
        "schema and the key column 'id' (values may be missing: empty or NA; the label and other columns are "
        "optional); the header has ['island']"
    )


def _profile(*columns: str) -> Profile:
    return Profile(rows=3, columns={c: ColumnCounts(3, 0, 0) for c in columns})


def test_columns_are_checked_after_pass_one():
    assert score.check_columns(_profile("id", "bill (mm)", "note", "island", "species"), SCHEMA, CONFIG) == ["note"]
    with pytest.raises(DataError) as e:
        score.check_columns(_profile("id", "island"), SCHEMA, CONFIG)
    assert str(e.value) == (
        "column(s) ['bill (mm)'] are missing: scoring needs every feature column of the schema and the key column "
        "'id' (values may be missing: empty or NA; the label and other columns are optional): no row has them; the "
        "input has ['id', 'island']"
    )
    with pytest.raises(DataError, match=r"^the input has no rows \(inputs: \['new.csv'\]\); check the files"):
        score.check_columns(Profile(), SCHEMA, CONFIG)


def test_the_encode_plan_sends_every_row_to_one_split_with_an_optional_label():
    plan = score.encode_plan(SCHEMA, CONFIG)
    assert (plan.optional_label, plan.eval_fraction, plan.test_fraction, plan.valid_fraction) == (True, 2.0, 0.0, 0.0)
    assert plan.classes == ("Adelie", "Gentoo") and plan.key_column == "id"
    assert [(f.name, f.slot) for f in plan.features] == [("bill (mm)", 1), ("island", 2)]


def test_the_manifest_counts_rows_and_fingerprints_outputs(tmp_path):
    (tmp_path / "part-00000.tfrecord").write_bytes(b"records")
    totals = Totals(num_features=2, max_categories=10, rows=5, bad=1, labelled=2)
    totals.counts[score.SPLIT] = 4
    totals.missing = [[0, 0], [1, 3], [0, 0], [0, 0]]
    inputs = [{"name": "new.csv", "sha256": "ab", "bytes": 10}]
    manifest = score.manifest(str(tmp_path), inputs, SCHEMA, ["note"], totals, {"part-00000.tfrecord": 4}, CONFIG)
    assert manifest["rows"] == {"total": 5, "written": 4, "bad": 1, "quarantined": 1, "labelled": 2}
    assert manifest["missing"] == {"bill (mm)": 1, "island": 3} and manifest["count"] == 4
    assert manifest["outputs"]["part-00000.tfrecord"]["records"] == 4
    assert manifest["config"]["data"] == ["new.csv"] and manifest["kind"] == "scoring"
    again = score.manifest(str(tmp_path), inputs, SCHEMA, ["note"], totals, {"part-00000.tfrecord": 4}, CONFIG)
    assert again == manifest  # no time stamps or locations: the same inputs give the same manifest
