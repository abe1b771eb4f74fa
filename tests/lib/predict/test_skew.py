"""`predict.skew`: the scored rows' counts over the training profile's bins, on the embedded penguins.

The training profile is made by `distribution.profile_values`, the code preparation profiles its split with; the
scored rows are coded and counted by `tally.Bins`, what the check runs on each parsed batch. The held-out
resamples are random 80/20 splits of the 344 penguins (the pipeline scores its eval split by default).
"""

from __future__ import annotations

import collections
import csv
import os

import numpy as np
import pytest
import tensorflow as tf
from skew_cases import CATEGORICALS, NUMERICS, PENGUIN_SCHEMA

from estimator_lib.config import ConfigError
from estimator_lib.config.skew import SkewConfig
from estimator_lib.data import distribution
from estimator_lib.predict import skew
from estimator_lib.predict.tally import Bins
from estimator_lib.schema import NUMERIC

PENGUINS = os.path.join(os.path.dirname(distribution.__file__), "penguins.csv")


def _penguins():
    """{column: values} of the embedded penguins: numerics as float64 (NaN for NA), categoricals as str or None."""
    with open(PENGUINS, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    columns = {n: np.array([np.nan if r[n] == "NA" else float(r[n]) for r in rows]) for n in NUMERICS}
    columns.update({n: [None if r[n] == "NA" else r[n] for r in rows] for n in CATEGORICALS})
    return columns


def _profile(columns, index):
    """`profile_values` of the rows `index` of `columns`."""
    numbers, categories, missing = {}, {}, []
    for i, f in enumerate(PENGUIN_SCHEMA.features):
        if f.kind == NUMERIC:
            numbers[i] = columns[f.name][index].astype("<f4")
            missing.append(int(np.isnan(numbers[i]).sum()))
        else:
            values = [columns[f.name][j] for j in index]
            categories[i] = collections.Counter(v for v in values if v is not None)
            missing.append(sum(v is None for v in values))
    return distribution.profile_values(PENGUIN_SCHEMA, numbers, categories, missing, len(index))


@pytest.fixture(scope="module")
def penguins():
    return _penguins()


def _scored(training, columns, index):
    """The rows `index` of `columns` as `skew.compare` reads them: coded and counted over `training`'s bins."""
    bins = Bins.of(training, PENGUIN_SCHEMA)
    parsed = {}
    for f in bins.features:
        if f.kind == NUMERIC:
            parsed[f.key] = tf.constant(columns[f.name][index].astype("<f4"))
        else:
            parsed[f.key] = tf.constant(
                [b"" if columns[f.name][j] is None else columns[f.name][j].encode() for j in index]
            )
    return bins.scored(bins.count(bins.columns(parsed, len(index)).numpy()))


def _split(seed: int, n: int = 344):
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[: n * 4 // 5]), np.sort(order[n * 4 // 5 :])


def test_held_out_rows_flag_nothing_in_20_resamples(penguins):
    flagged, largest_psi = [], 0.0
    for seed in range(20):
        train, held_out = _split(seed)
        training = _profile(penguins, train)
        report = skew.compare(training, _scored(training, penguins, held_out), SkewConfig())
        flagged += [(seed, f.feature, f.breaches) for f in report.flagged]
        largest_psi = max([largest_psi] + [f.figures.get("distance (PSI)", 0.0) for f in report.features])
    print(f"flagged {flagged}; largest PSI {largest_psi:.4f}")
    assert len(flagged) <= 1, flagged


def _held_out(penguins):
    train, held_out = _split(0)
    scored = {n: (v[held_out] if n in NUMERICS else [v[j] for j in held_out]) for n, v in penguins.items()}
    return _profile(penguins, train), scored


def _scored_rows(training, scored):
    return _scored(training, scored, np.arange(len(scored["year"])))


def test_a_numeric_column_shifted_by_two_standard_deviations_is_flagged_by_its_psi(penguins):
    training, scored = _held_out(penguins)
    std = training["features"]["bill_length_mm"]["std"]
    scored["bill_length_mm"] = scored["bill_length_mm"] + 2 * std
    report = skew.compare(training, _scored_rows(training, scored), SkewConfig())
    assert [f.feature for f in report.flagged] == ["bill_length_mm"]
    shifted = report.flagged[0]
    assert shifted.breaches == ("out of range", "distance (PSI)")
    assert round(shifted.figures["distance (PSI)"], 2) == 2.95
    assert shifted.figures["out of range"] == 23 / 68  # exact: the 23 of 68 present values above the training max
    assert shifted.reading == (
        "`bill_length_mm`: its distribution moved (PSI 2.95 over the training deciles; 75% of its values lie above "
        "50.5 here, 10% in training)"
    )
    assert report.status == skew.WARNED


def test_a_category_never_seen_at_30_percent_of_rows_is_flagged_with_its_reading(penguins):
    training, scored = _held_out(penguins)
    n = len(scored["island"])
    scored["island"] = ["Atlantis" if j % 10 < 3 else v for j, v in enumerate(scored["island"])]
    report = skew.compare(training, _scored_rows(training, scored), SkewConfig())
    assert [f.feature for f in report.flagged] == ["island"]
    island = report.flagged[0]
    assert island.figures["unseen share"] == pytest.approx(21 / n)
    assert island.breaches == ("distance (PSI)", "unseen share")
    assert island.reading == "`island`: 30% of its values are a category never seen in training"


def test_a_column_made_mostly_missing_is_flagged(penguins):
    training, scored = _held_out(penguins)
    mass = scored["body_mass_g"].copy()
    mass[::2] = np.nan
    scored["body_mass_g"] = mass
    report = skew.compare(training, _scored_rows(training, scored), SkewConfig())
    assert [f.feature for f in report.flagged] == ["body_mass_g"]
    assert report.flagged[0].breaches == ("missing change",)
    assert report.flagged[0].reading == "`body_mass_g`: 51% of rows are missing it (0% in training)"


def test_three_skews_are_flagged_worst_first_and_block_names_them(penguins):
    training, scored = _held_out(penguins)
    scored["bill_length_mm"] = scored["bill_length_mm"] + 2 * training["features"]["bill_length_mm"]["std"]
    scored["island"] = ["Atlantis" if j % 10 < 3 else v for j, v in enumerate(scored["island"])]
    scored["sex"] = [None if j % 2 else v for j, v in enumerate(scored["sex"])]
    report = skew.compare(training, _scored_rows(training, scored), SkewConfig(skew="block"))
    # worst first: each by its largest figure / threshold ratio
    assert [f.feature for f in report.flagged] == ["island", "bill_length_mm", "sex"]
    assert [f.severity for f in report.flagged] == sorted((f.severity for f in report.flagged), reverse=True)
    assert report.status == skew.BLOCKED
    with pytest.raises(skew.SkewError, match=r"blocked: 3 of 7 features skewed: `island`: 30% .*No prediction"):
        skew.enforce(report)
    assert skew.headline(report.to_dict())["worst"][0]["feature"] == "island"
    assert report.to_dict()["flagged"] == ["island", "bill_length_mm", "sex"]


def test_a_per_feature_override_raises_that_features_limit_only(penguins):
    training, scored = _held_out(penguins)
    scored["island"] = ["Atlantis" if j % 10 < 3 else v for j, v in enumerate(scored["island"])]
    config = SkewConfig(features={"island": {"max_unseen_share": 0.5, "max_distance": 5.0}})
    report = skew.compare(training, _scored_rows(training, scored), config)
    assert report.flagged == () and report.status == skew.PASSED
    island = next(f for f in report.features if f.feature == "island")
    assert island.thresholds["unseen share"] == 0.5 and island.figures["unseen share"] > 0.05


def test_an_override_of_a_feature_the_model_never_saw_is_an_error_naming_it(penguins):
    training, scored = _held_out(penguins)
    config = SkewConfig(features={"islnd": {"max_unseen_share": 0.5}})
    with pytest.raises(skew.SkewError, match=r"predict.features names \['islnd'\], which the model was not trained"):
        skew.compare(training, _scored_rows(training, scored), config)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"skew": "stop"}, r"predict.skew='stop' must be one of \['off', 'warn', 'block'\]"),
        ({"max_distance": -1.0}, r"predict.max_distance=-1.0 must be a number >= 0"),
        ({"features": {"island": {"max_psi": 1.0}}}, r"predict.features\['island'\]: unknown threshold 'max_psi'"),
        ({"features": {"island": {"max_distance": "x"}}}, r"predict.features\['island'\].max_distance='x' must be"),
    ],
)
def test_bad_settings_are_errors_naming_the_setting(fields, message):
    with pytest.raises(ConfigError, match=message):
        SkewConfig(**fields)


def test_off_reads_nothing_and_a_model_without_a_profile_is_skipped():
    missing = ["/nonexistent/rows.tfrecord"]
    assert skew.SkewCheck({"features": {}}, SkewConfig(skew="off")).start(missing, PENGUIN_SCHEMA, 3) is None
    report = skew.SkewCheck(None, SkewConfig(skew="block")).start(missing, PENGUIN_SCHEMA, 3).result()
    assert report.status == skew.SKIPPED and report.summary().startswith("skipped: the model records no profile")
