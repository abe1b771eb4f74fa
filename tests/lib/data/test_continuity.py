"""Preparing against a reference schema (the published model a run continues): what is kept, what fails."""

from __future__ import annotations

import json
import os

import pytest
from penguin_rows import penguin_rows, write_rows

from estimator_lib.config import ConfigError, PrepareConfig, ValidationConfig
from estimator_lib.data import retrain, validation
from estimator_lib.data.common import DataError
from estimator_lib.data.prepare import prepare
from estimator_lib.data.stats import append_only


def _prepare(tmp_path, name, rows, reference=None, **fields):
    fields = {"label": "species", "num_workers": 1, **fields}
    config = PrepareConfig(data=(write_rows(tmp_path / f"{name}.csv", rows),), **fields)
    return prepare(config, str(tmp_path / name), reference=reference)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return _prepare(tmp_path_factory.mktemp("base"), "base", penguin_rows())


def test_append_only_keeps_known_ids_and_caps_the_additions():
    assert append_only(("b", "a"), ("a", "c", "b", "d"), limit=10) == ("b", "a", "c", "d")
    assert append_only(("b", "a"), ("c", "d"), limit=3) == ("b", "a", "c")
    assert append_only(("b", "a"), ("c",), limit=1) == ("b", "a")  # known values are never dropped


def test_normalisation_is_kept_unless_refit(base, tmp_path):
    heavier = [
        {**r, "body_mass_g": r["body_mass_g"] if r["body_mass_g"] == "NA" else str(float(r["body_mass_g"]) * 2)}
        for r in penguin_rows()
    ]
    kept = _prepare(tmp_path, "kept", heavier, base.schema).schema.feature("body_mass_g")
    refit = _prepare(tmp_path, "refit", heavier, base.schema, refit_normalization=True).schema.feature("body_mass_g")
    old = base.schema.feature("body_mass_g")
    assert (kept.mean, kept.std) == (old.mean, old.std) and kept.max == pytest.approx(2 * old.max)
    assert refit.mean == pytest.approx(2 * old.mean, rel=0.05) and refit.std == pytest.approx(2 * old.std, rel=0.05)


def test_a_regression_labels_scale_is_kept(tmp_path):
    rows = [r for r in penguin_rows() if r["body_mass_g"] != "NA"]
    first = _prepare(tmp_path, "r1", rows, label="body_mass_g", task="regression")
    grams = [{**r, "body_mass_g": str(float(r["body_mass_g"]) + 500)} for r in rows]
    second = _prepare(tmp_path, "r2", grams, first.schema, label="body_mass_g")
    assert (second.schema.label.mean, second.schema.label.std) == (first.schema.label.mean, first.schema.label.std)
    assert second.schema.label.min >= min(float(r["body_mass_g"]) for r in rows) + 500  # the range is the new data's


def test_label_classes_keep_their_order_and_a_missing_class_is_fine(base, tmp_path):
    no_adelie = [r for r in penguin_rows() if r["species"] != "Adelie"]
    continued = _prepare(tmp_path, "two", no_adelie, base.schema)
    assert continued.schema.label.classes == base.schema.label.classes == ("Adelie", "Chinstrap", "Gentoo")
    assert "label class 'Adelie' has no good training row" in continued.manifest["notes"]


def test_another_task_fails_naming_both_and_the_cold_start(base, tmp_path):
    expected = (
        r"task='regression' differs from the published model's task 'classification'.*--warm-start none --baseline"
    )
    with pytest.raises(DataError, match=expected):
        _prepare(tmp_path, "task", penguin_rows(), base.schema, task="regression")


def test_another_label_fails_naming_both(base, tmp_path):
    with pytest.raises(DataError, match=r"label 'island' differs from the published model's label 'species'"):
        _prepare(tmp_path, "label", penguin_rows(), base.schema, label="island")


def test_a_schema_uri_and_a_reference_do_not_mix(base, tmp_path):
    with pytest.raises(ConfigError, match=r"schema_uri is set while the run continues a published model's schema"):
        _prepare(tmp_path, "both", penguin_rows(), base.schema, schema_uri=os.path.join(base.output_dir, "schema.json"))


def test_a_reference_without_a_data_profile_is_continued_and_the_checks_skipped(base, tmp_path):
    model = tmp_path / "old-export"
    os.makedirs(model / "assets.extra")
    (model / retrain.EXPORT_METADATA).write_text(json.dumps({"schema": base.schema.to_dict()}))
    config = PrepareConfig(data=(write_rows(tmp_path / "new.csv", penguin_rows()),), label="species", num_workers=1)
    continued = retrain.prepare_continuing(
        config, str(tmp_path / "data"), str(model), ValidationConfig(), str(tmp_path / "v.md")
    )
    assert continued.prepared.manifest["schema_source"] == "reference"
    assert continued.report.status == validation.SKIPPED
    assert (
        continued.report.summary() == f"skipped: {model} records no profile of its data (exported before profiles were)"
    )


def test_a_reference_that_is_not_an_export_names_the_fix(tmp_path):
    config = PrepareConfig(data=(write_rows(tmp_path / "new.csv", penguin_rows()),), label="species", num_workers=1)
    with pytest.raises(FileNotFoundError, match=r"has no assets.extra/export_metadata.json, so its schema is unknown"):
        retrain.prepare_continuing(
            config, str(tmp_path / "data"), str(tmp_path), ValidationConfig(), str(tmp_path / "v.md")
        )
