"""Data validation against a reference model's data: each kind of breach names the feature, figure and setting."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from penguin_rows import penguin_rows, write_rows

from estimator_lib.config import ConfigError, PrepareConfig, ValidationConfig
from estimator_lib.data import retrain, validation
from estimator_lib.data.common import DataError
from estimator_lib.data.prepare import prepare


def _config(path):
    return PrepareConfig(data=(path,), label="species", num_workers=1)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A model directory holding what an export records about its data: the schema and the data profile."""
    root = tmp_path_factory.mktemp("reference")
    prepared = prepare(_config(write_rows(root / "base.csv", penguin_rows())), str(root / "prepared"))
    model = root / "model"
    os.makedirs(model / "assets.extra")
    metadata = {"schema": prepared.schema.to_dict(), "data_profile": prepared.profile()}
    (model / retrain.EXPORT_METADATA).write_text(json.dumps(metadata))
    return str(model)


# The checks `_validate` runs when a test does not name them: the defaults.
DEFAULT_CHECKS = ValidationConfig()


def _validate(reference, tmp_path, rows, checks=DEFAULT_CHECKS):
    return retrain.prepare_continuing(
        _config(write_rows(tmp_path / "new.csv", rows)),
        str(tmp_path / "data"),
        reference,
        checks,
        str(tmp_path / "v.md"),
    )


def test_the_same_data_passes_every_check(reference, tmp_path):
    continued = _validate(reference, tmp_path, penguin_rows())
    assert continued.report.status == validation.PASSED and not continued.report.breaches
    assert {f.check for f in continued.report.findings} == {
        "row ratio",
        "missing change",
        "distance (PSI)",
        "unseen share",
        "mean shift (std)",
        "std ratio",
    }
    assert all(
        f.value == pytest.approx(0.0, abs=1e-9) or f.check in ("row ratio", "std ratio")
        for f in continued.report.findings
    )
    assert "**passed**" in (tmp_path / "v.md").read_text()


def test_a_dropped_column_fails_naming_it(reference, tmp_path):
    rows = [{k: v for k, v in r.items() if k != "sex"} for r in penguin_rows()]
    with pytest.raises(validation.DataValidationError, match=r"sex: dropped column \(validation.schema_changes=fail\)"):
        _validate(reference, tmp_path, rows)
    report = (tmp_path / "v.md").read_text()
    assert "| sex | dropped column |" in report and "**failed**" in report


def test_a_dropped_column_with_warn_is_read_as_missing(reference, tmp_path):
    rows = [{k: v for k, v in r.items() if k != "sex"} for r in penguin_rows()]
    continued = _validate(reference, tmp_path, rows, ValidationConfig(on_breach="warn"))
    assert continued.report.status == validation.WARNED
    assert continued.prepared.manifest["absent_columns"] == ["sex"]
    assert continued.prepared.profile()["features"]["sex"]["present"] == 0


def test_a_new_column_is_reported_and_left_out(reference, tmp_path):
    rows = [{**r, "colour": "grey"} for r in penguin_rows()]
    continued = _validate(reference, tmp_path, rows, ValidationConfig(schema_changes="warn"))
    assert continued.report.status == validation.PASSED
    assert [f.text() for f in continued.report.findings if f.check == "new column"] == [
        "colour: new column (validation.schema_changes=warn)"
    ]
    assert "colour" not in [f.name for f in continued.prepared.schema.features]


def test_a_retyped_column_fails_before_anything_is_written(reference, tmp_path):
    rows = [{**r, "bill_length_mm": f"{r['bill_length_mm']} mm"} for r in penguin_rows()]
    with pytest.raises(
        DataError, match=r"column 'bill_length_mm' was numeric .* but only 0% of its values are numbers now \(retyped"
    ):
        _validate(reference, tmp_path, rows)
    assert not os.path.exists(tmp_path / "data")


def test_a_renamed_category_fails_on_its_unseen_share(reference, tmp_path):
    rows = [{**r, "island": "Dream Island" if r["island"] == "Dream" else r["island"]} for r in penguin_rows()]
    with pytest.raises(validation.DataValidationError) as error:
        _validate(reference, tmp_path, rows)
    message = str(error.value)
    share = [f for f in validation_findings(tmp_path) if f["check"] == "unseen share"]
    assert message.startswith("data validation failed, 2 breach(es) against ")
    assert re.search(r"island: unseen share 0\.3\d+ beyond 0\.1 \(validation.max_unseen_share\)", message)
    assert "island: distance (PSI)" in message and "--set validation.on_breach=warn" in message and share


def validation_findings(tmp_path):
    text = (tmp_path / "v.md").read_text()
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[0] == "island":
            out.append({"feature": cells[0], "check": cells[1], "value": cells[2]})
    return out


def test_a_unit_change_fails_on_distance_and_mean_shift(reference, tmp_path):
    rows = [
        {**r, "body_mass_g": r["body_mass_g"] if r["body_mass_g"] == "NA" else str(float(r["body_mass_g"]) / 1000)}
        for r in penguin_rows()
    ]
    with pytest.raises(validation.DataValidationError) as error:
        _validate(reference, tmp_path, rows)
    message = str(error.value)
    assert re.search(r"body_mass_g: distance \(PSI\) \d+(\.\d+)? beyond 0\.25 \(validation.max_distance\)", message)
    assert re.search(r"body_mass_g: mean shift \(std\) 5\.\d+ beyond 1 \(validation.max_mean_shift\)", message)


def test_the_drift_table_holds_every_measured_figure_per_feature(reference, tmp_path):
    rows = [{**r, "island": "Dream Island" if r["island"] == "Dream" else r["island"]} for r in penguin_rows()]
    report = _validate(reference, tmp_path, rows, ValidationConfig(on_breach="warn")).report
    drift = report.drift()
    unseen = next(f for f in report.breaches if f.feature == "island" and f.check == "unseen share")
    assert drift["island"]["unseen share"] == round(unseen.value, 4) and 0.3 < unseen.value < 0.4  # Dream: 124/344
    # Other rows fall in the train split (a row's key hashes its contents), so the untouched columns move a little.
    bill = drift["bill_length_mm"]
    assert set(bill) == {"missing change", "distance (PSI)", "mean shift (std)", "std ratio"}
    assert bill["distance (PSI)"] < 0.05 and bill["mean shift (std)"] < 0.05 and abs(bill["std ratio"] - 1) < 0.05
    assert sum(len(figures) for figures in drift.values()) == sum(f.value is not None for f in report.findings)


def test_a_jump_in_missing_values_and_a_shrunk_table_breach(reference, tmp_path):
    rows = [
        {**r, "flipper_length_mm": "NA" if i % 3 == 0 else r["flipper_length_mm"]} for i, r in enumerate(penguin_rows())
    ]
    continued = _validate(reference, tmp_path, rows[:120], ValidationConfig(on_breach="warn"))
    texts = [f.text() for f in continued.report.breaches]
    assert any(t.startswith("flipper_length_mm: missing change 0.3") for t in texts)
    assert any(t.startswith("(rows): row ratio 0.3") and "validation.min_row_ratio" in t for t in texts)


def test_without_a_reference_nothing_is_checked(tmp_path):
    continued = retrain.prepare_continuing(
        _config(write_rows(tmp_path / "a.csv", penguin_rows())),
        str(tmp_path / "data"),
        None,
        ValidationConfig(),
        str(tmp_path / "v.md"),
    )
    assert continued.report.status == validation.SKIPPED and continued.prepared.manifest["schema_source"] == "inferred"


def test_psi_is_zero_for_equal_shares_and_grows_with_the_shift():
    same = np.array([0.5, 0.3, 0.2])
    assert validation.psi(same, same) == 0.0
    assert validation.psi(same, np.array([0.2, 0.3, 0.5])) == pytest.approx(2 * 0.3 * np.log(2.5))


def test_validation_config_names_a_bad_setting():
    with pytest.raises(ConfigError, match=r"validation.on_breach='stop' must be 'fail' or 'warn'"):
        ValidationConfig(on_breach="stop")
    with pytest.raises(ConfigError, match=r"validation.max_std_ratio=0.5 must be a number >= 1"):
        ValidationConfig(max_std_ratio=0.5)
