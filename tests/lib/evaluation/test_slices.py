"""Sliced metrics on tiny tables: slice assignment from original values, the table, its checks in the blessing."""

from __future__ import annotations

import glob
import math

import numpy as np
import pytest
import synthetic
import tensorflow as tf

from estimator_lib.config import BlessingConfig, BlessingError, JobConfig
from estimator_lib.data.prepare import PrepareResult
from estimator_lib.evaluation import Scores, Truth, compute_metrics, decide, evaluate_and_bless
from estimator_lib.evaluation import slices as s
from estimator_lib.evaluation.blessing import decide_user


def test_numbers_fall_in_quantile_buckets_of_the_eval_rows_and_missing_is_a_value():
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, math.nan])
    labels = s.value_labels(values, 4)
    # Quantile edges of the 8 present values: 1, 2.75, 4.5, 6.25, 8; an edge's value goes to the bucket above.
    assert labels.tolist() == [
        "[1, 2.75)",
        "[1, 2.75)",
        "[2.75, 4.5)",
        "[2.75, 4.5)",
        "[4.5, 6.25)",
        "[4.5, 6.25)",
        "[6.25, 8]",
        "[6.25, 8]",
        "missing",
    ]
    assert s.value_labels(np.array([3.0, 3.0, 5.0, 5.0]), 4).tolist() == ["[3, 4)"] * 2 + ["[4, 5]"] * 2
    assert s.value_labels(np.array([2.0, 2.0]), 4).tolist() == ["[2, 2]", "[2, 2]"]
    assert s.value_labels(np.array(["Dream", None, "Biscoe"], dtype=object), 4).tolist() == [
        "Dream",
        "missing",
        "Biscoe",
    ]


def test_repeated_values_make_fewer_buckets():
    labels = s.value_labels(np.array([0.0] * 6 + [1.0] * 2), 4)  # quantiles 0, 0, 0, 0.25, 1: edges 0, 0.25, 1
    assert labels.tolist() == ["[0, 0.25)"] * 6 + ["[0.25, 1]"] * 2


def test_a_cross_cuts_by_every_pair_that_occurs_and_too_many_slices_is_an_error():
    labels = {
        "island": np.array(["Dream", "Dream", "Biscoe", "Torgersen"], dtype=object),
        "sex": np.array(["male", "female", "male", "missing"], dtype=object),
    }
    one, cross = s.assign_slices(labels, ["island", "island,sex"])
    assert one.names == ("island=Biscoe", "island=Dream", "island=Torgersen")
    assert one.ids.tolist() == [1, 1, 0, 2] and one.rows() == [1, 2, 1]
    assert cross.features == ("island", "sex")
    assert cross.names == (
        "island=Biscoe,sex=male",
        "island=Dream,sex=female",
        "island=Dream,sex=male",
        "island=Torgersen,sex=missing",
    )
    assert cross.ids.tolist() == [2, 1, 0, 3]
    with pytest.raises(
        BlessingError, match=r"cut the eval rows into 7 slices \{'island': 3, 'island,sex': 4\}, more than 5: "
    ):
        s.assign_slices(labels, ["island", "island,sex"], limit=5)


def twelve_rows():
    """12 rows: island A (8 rows, 7 right), island B (4 rows, 1 right)."""
    classes = ("no", "yes")
    labels = np.array(["yes", "no"] * 6, dtype=object)
    right = np.array([1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0], dtype=bool)
    predicted = np.where(right, labels, np.where(labels == "yes", "no", "yes")).astype(object)
    p_yes = np.where(predicted == "yes", 0.8, 0.2)
    truth = Truth(tuple(f"k{i}" for i in range(12)), labels, classes)
    scores = Scores(predicted, np.stack([1 - p_yes, p_yes], axis=1))
    sets = s.assign_slices({"island": np.array(["A"] * 8 + ["B"] * 4, dtype=object)}, ["island"])
    return truth, scores, sets


def test_each_slice_gets_the_one_metric_definition_on_its_rows():
    truth, scores, sets = twelve_rows()
    (a, b) = s.slice_metrics(truth, scores, sets)
    assert (a["name"], a["features"], a["rows"]) == ("island=A", ["island"], 8)
    assert a["metrics"]["accuracy"] == 7 / 8 and b["metrics"]["accuracy"] == 1 / 4
    mask = np.arange(12) >= 8
    part = Truth(tuple(np.array(truth.keys)[mask]), truth.labels[mask], truth.classes)
    assert b["metrics"] == compute_metrics(part, Scores(scores.predicted[mask], scores.probabilities[mask]))


def table(**config):
    truth, scores, sets = twelve_rows()
    blessing = BlessingConfig(slices=("island",), **config)
    overall = compute_metrics(truth, scores)
    return blessing, truth, overall, s.optional_table(blessing, truth, scores, sets, overall, "accuracy")


def test_the_table_is_worst_first_and_a_small_slice_is_shown_but_not_judged():
    _, _, overall, shown = table(min_slice_rows=5, slice_thresholds={"accuracy": 0.5})
    assert shown["metric"] == "accuracy" and shown["min_rows"] == 5 and shown["overall"]["accuracy"] == 8 / 12
    assert [(e["name"], e["judged"], e["passed"]) for e in shown["slices"]] == [
        ("island=A", True, True),
        ("island=B", False, None),
    ]
    _, _, _, judged = table(min_slice_rows=4, slice_thresholds={"accuracy": 0.5})
    assert [(e["name"], e["passed"]) for e in judged["slices"]] == [("island=B", False), ("island=A", True)]


def test_a_judged_slice_without_a_bound_has_no_verdict():
    _, _, _, shown = table(min_slice_rows=4)
    assert [(e["name"], e["judged"], e["passed"]) for e in shown["slices"]] == [
        ("island=B", True, None),
        ("island=A", True, None),
    ]


def test_a_failing_slice_blocks_the_blessing_naming_the_slice():
    config, truth, overall, shown = table(min_slice_rows=4, slice_thresholds={"accuracy": 0.5}, beat_trivial=False)
    blessing = decide(config, truth, overall, slices=shown)
    assert not blessing.blessed
    assert blessing.reasons == ("slice island=B (4 rows): accuracy=0.2500 >= 0.5000 fails",)


def test_the_gap_to_the_overall_metric_is_judged_and_a_met_bound_is_one_passing_check():
    config, truth, overall, shown = table(
        min_slice_rows=4, slice_thresholds={"accuracy": 0.2}, slice_max_gap={"log_loss": 0.5}, beat_trivial=False
    )
    blessing = decide(config, truth, overall, slices=shown)
    passed = [c.message for c in blessing.checks if c.passed]
    assert passed == [
        "every judged slice (2) meets it; the worst, slice island=B (4 rows): accuracy=0.2500 >= 0.2000 holds"
    ]
    gap_bound, log_loss = overall["log_loss"] + 0.5, (-math.log(0.8) - 3 * math.log(0.2)) / 4
    (reason,) = blessing.reasons
    assert reason == (
        f"slice island=B (4 rows): log_loss={log_loss:.4f} <= {gap_bound:.4f} fails (at most 0.5 worse than the "
        f"overall {overall['log_loss']:.4f}, blessing.slice_max_gap)"
    )


def test_a_user_models_slices_are_judged_by_its_metrics_direction():
    config = BlessingConfig(
        slices=("shape",),
        slice_thresholds={"nll": 1.0},
        directions={"nll": "lower"},
        comparison_metric="nll",
        min_slice_rows=1,
    )
    entries = [{"name": "shape=round", "features": ["shape"], "rows": 3, "metrics": {"nll": 1.5}}]
    shown = s.slice_table(config, "nll", {"nll": 0.9}, entries)
    blessing = decide_user(config, {"nll": 0.9}, 3, slices=shown)
    assert blessing.reasons == ("slice shape=round (3 rows): nll=1.5000 <= 1.0000 fails",)


def test_slice_settings_are_checked_with_the_setting_and_the_fix():
    with pytest.raises(
        BlessingError,
        match=r"blessing.slice_thresholds=\{'accuracy': 0.8\} judges slices, and blessing.slices names none",
    ):
        BlessingConfig(slice_thresholds={"accuracy": 0.8})
    with pytest.raises(
        BlessingError, match=r"blessing.slices: 'island,island' must be a feature's name or a comma-joined cross"
    ):
        BlessingConfig(slices=("island,island",))
    with pytest.raises(BlessingError, match=r"blessing.min_slice_rows=0 must be an integer >= 1"):
        BlessingConfig(min_slice_rows=0)
    config = BlessingConfig(slices=("island", " island , sex"))
    assert config.slices == ("island", "island,sex") and config.slice_features == ("island", "sex")
    with pytest.raises(
        BlessingError, match=r"names \['sex'\], which are not features of the data; they are \['island'\]"
    ):
        config.check_slice_features(["island"])


def test_original_values_are_read_from_prepared_records(tmp_path):
    schema = synthetic.make_schema("binary")
    rows = synthetic.make_rows(40, 3)
    files, _ = synthetic.write_dataset(str(tmp_path / "eval"), rows, schema)
    keys, values = s.read_original_values(schema, [files], ["colour", "x-2"])
    assert len(keys) == 40 and sorted(values["colour"].tolist()) == sorted(r["colour"] for r in rows)
    assert int(np.isnan(values["x-2"]).sum()) == sum(r["x-2"] is None for r in rows) == 3


def test_metric_and_slice_scalars_reach_tensorboard(tmp_path):
    _, _, _, shown = table()
    s.write_summaries(str(tmp_path), 7, {"r2": 0.5}, shown)
    (path,) = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    tags = {
        v.tag: (e.step, tf.make_ndarray(v.tensor))
        for e in tf.compat.v1.train.summary_iterator(path)
        for v in e.summary.value
    }
    assert tags["slices/island=B/accuracy"] == (7, pytest.approx(0.25))
    assert tags["slices/island=A/rows"][1] == 8
    assert s.flat_metrics(shown)["island=B/rows"] == 4.0
    assert tags["r2"] == (7, pytest.approx(0.5))  # the eval metrics by their vocabulary names, one event file


def test_the_evaluate_stage_refuses_a_slice_of_a_feature_the_data_lacks_before_any_work(tmp_path):
    prepared = PrepareResult(str(tmp_path / "p"), synthetic.make_schema("binary"), {"train": 10, "eval": 5}, {})
    config = BlessingConfig(slices=("colour,size",))
    message = r"names \['size'\], which are not features of the data; they are \['x 1', 'x-2', 'colour'\]"
    with pytest.raises(BlessingError, match=message):
        evaluate_and_bless(JobConfig(), prepared, str(tmp_path / "no-model"), config, None, str(tmp_path / "e"))
    assert not (tmp_path / "e").exists()
