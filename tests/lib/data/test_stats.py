"""data/stats.py: merging the chunks' partial statistics in order and building the schema from them (fitted,
supplied and continued vocabularies and normalisation), the manifest's notes and summary. Chunk results are
built by hand so every statistic is known exactly."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from estimator_lib.config import PrepareConfig
from estimator_lib.data.combine import NumericStats
from estimator_lib.data.common import DataError
from estimator_lib.data.encode import ChunkResult
from estimator_lib.data.plan import Decisions
from estimator_lib.data.stats import Totals, _bounded, build_schema, notes, summary
from estimator_lib.schema import CATEGORICAL, NUMERIC, FeatureSpec, LabelSpec, Schema

CONFIG = PrepareConfig(data=("in.csv",), label="y")
FEATURES = (FeatureSpec("n", "f_n", NUMERIC), FeatureSpec("c", "f_c", CATEGORICAL, value_type="string"))
CLASSES = ("no", "yes")


def chunk(numbers, categories, classes, missing=(0, 0), eval_rows=0, bad=0, label_values=()) -> ChunkResult:
    """A pass-2 chunk result: training rows' numbers, categories and class ids; `eval_rows` eval examples."""
    class_counts = [collections.Counter(classes), collections.Counter(), collections.Counter(), collections.Counter()]
    return ChunkResult(
        rows=len(classes) + eval_rows + bad,
        examples=([b"x"] * len(classes), [b"e"] * eval_rows, [], []),
        bad=[{"reason": "bad"}] * bad,
        missing=[list(missing), [0, 1], [0, 0], [0, 0]],
        numeric={0: NumericStats.of(np.array(numbers, np.float64))},
        categories={1: collections.Counter(categories)},
        class_counts=class_counts,
        label_moments=NumericStats.of(np.array(label_values, np.float64)),
        labelled=len(classes),
    )


def totals(*parts: ChunkResult, max_categories: int = 100) -> Totals:
    out = Totals(num_features=2, max_categories=max_categories)
    for part in parts:
        out.add(part)
    return out


def decisions(task="classification", classes=CLASSES, features=FEATURES, supplied=None, reference=None) -> Decisions:
    return Decisions(features, task, classes, False, (), supplied, reference)


@pytest.fixture
def merged() -> Totals:
    return totals(
        chunk([1.0, 3.0], ["b", "a", "b"], [0, 1, 1], missing=(1, 0), eval_rows=2, bad=1),
        chunk([5.0], ["a", "c"], [1], missing=(2, 0)),
    )


# -- merging -------------------------------------------------------------------------------------------------
def test_totals_add_sums_counts_and_merges_moments(merged):
    assert (merged.rows, merged.bad, merged.labelled) == (7, 1, 4)
    assert merged.counts == [4, 2, 0, 0]
    assert merged.missing == [[3, 0], [0, 2], [0, 0], [0, 0]]
    m = merged.numeric[0]
    assert (m.count, m.mean, m.min, m.max, m.variance) == (3, 3.0, 1.0, 5.0, 8 / 3)
    assert merged.categories[1] == collections.Counter({"a": 2, "b": 2, "c": 1})
    assert merged.class_counts[0] == collections.Counter({1: 3, 0: 1})


def test_bounded_keeps_the_most_frequent_half_beyond_the_limit():
    counter = collections.Counter({"a": 5, "b": 1, "c": 3, "d": 3, "e": 2})
    assert _bounded(counter, 5) is counter
    assert _bounded(counter, 4) == collections.Counter({"a": 5, "c": 3})  # ties broken by text: c before d
    merged = totals(chunk([1.0], ["a", "a", "b"], [0]), chunk([2.0], ["c"], [1]), max_categories=2)
    assert merged.categories[1] == collections.Counter({"a": 2})


# -- the schema ----------------------------------------------------------------------------------------------
def test_build_schema_fits_numerics_and_ranks_vocabulary(merged):
    schema = build_schema(decisions(), merged, CONFIG)
    n, c = schema.features
    assert (n.mean, n.min, n.max, n.missing_count) == (3.0, 1.0, 5.0, 3)
    assert n.std == pytest.approx((8.0 / 3) ** 0.5)
    assert (c.vocabulary, c.missing_count) == (("a", "b", "c"), 0)  # by count, ties by text
    assert schema.label == LabelSpec("y", "classification", classes=CLASSES) and schema.key_column is None


def test_vocabulary_is_capped_and_a_supplied_one_kept(merged):
    capped = build_schema(decisions(), merged, PrepareConfig(data=("in.csv",), label="y", max_vocabulary_size=2))
    assert capped.features[1].vocabulary == ("a", "b")
    given = (FEATURES[0], FeatureSpec("c", "f_c", CATEGORICAL, value_type="string", vocabulary=("z", "a")))
    supplied = Schema(given, LabelSpec("y", "classification", classes=CLASSES))
    kept = build_schema(decisions(features=given, supplied=supplied), merged, CONFIG)
    assert kept.features[1].vocabulary == ("z", "a")


def test_constant_and_empty_numeric_columns_get_std_one():
    constant = build_schema(decisions(), totals(chunk([4.0, 4.0], ["a"], [0, 1])), CONFIG).features[0]
    assert (constant.mean, constant.std, constant.min, constant.max) == (4.0, 1.0, 4.0, 4.0)
    empty = build_schema(decisions(), totals(chunk([], ["a"], [0, 1], missing=(2, 0))), CONFIG).features[0]
    assert (empty.mean, empty.std, empty.min, empty.max, empty.missing_count) == (0.0, 1.0, 0.0, 0.0, 2)


def test_reference_keeps_ids_and_normalisation_unless_refit(merged):
    old = (
        FeatureSpec("n", "f_n", NUMERIC, mean=10.0, std=4.0),
        FeatureSpec("c", "f_c", CATEGORICAL, value_type="string", vocabulary=("c", "z")),
    )
    reference = Schema(old, LabelSpec("y", "classification", classes=CLASSES))
    kept = build_schema(decisions(features=old, reference=reference), merged, CONFIG)
    assert (kept.features[0].mean, kept.features[0].std, kept.features[0].max) == (10.0, 4.0, 5.0)
    assert kept.features[1].vocabulary == ("c", "z", "a", "b")  # known ids first, then new values by count
    refit_config = PrepareConfig(data=("in.csv",), label="y", refit_normalization=True)
    refit = build_schema(decisions(features=old, reference=reference), merged, refit_config)
    assert refit.features[0].mean == 3.0


def test_regression_label_statistics_and_errors():
    parts = chunk([1.0], ["a"], [], label_values=[2.0, 4.0, 6.0])
    label = build_schema(decisions("regression", ()), totals(parts), CONFIG).label
    assert (label.task, label.mean, label.min, label.max) == ("regression", 4.0, 2.0, 6.0)
    assert label.std == pytest.approx((8.0 / 3) ** 0.5)
    with pytest.raises(DataError) as e:
        build_schema(decisions("regression", ()), totals(chunk([1.0], ["a"], [], label_values=[3.0, 3.0])), CONFIG)
    assert str(e.value) == (
        "label column 'y' has the same value 3.0 in all 2 training rows; regression needs a label that varies"
    )
    with pytest.raises(DataError, match="no training row has a usable value in label column 'y'"):
        build_schema(decisions("regression", ()), totals(chunk([1.0], ["a"], [])), CONFIG)


def test_regression_reference_keeps_its_mean_and_std():
    reference = Schema(FEATURES, LabelSpec("y", "regression", mean=100.0, std=10.0))
    parts = chunk([1.0], ["a"], [], label_values=[2.0, 4.0])
    label = build_schema(decisions("regression", (), reference=reference), totals(parts), CONFIG).label
    assert (label.mean, label.std, label.min, label.max) == (100.0, 10.0, 2.0, 4.0)


def test_no_chunk_at_all_gives_neutral_statistics_and_says_so():
    empty = totals()
    assert (empty.rows, empty.counts, empty.missing) == (0, [0, 0, 0, 0], [[0, 0]] * 4)
    schema = build_schema(decisions(), empty, CONFIG)
    n, c = schema.features
    assert (n.mean, n.std, n.min, n.max, c.vocabulary) == (0.0, 1.0, 0.0, 0.0, ())
    assert notes(schema, empty, CONFIG) == [
        "column 'n' has no value in the training split (mean 0, std 1 used)",
        "label class 'no' has no good training row",
        "label class 'yes' has no good training row",
    ]


# -- notes and summary ---------------------------------------------------------------------------------------
def test_notes_name_constant_empty_columns_and_classes_without_rows():
    schema = Schema(FEATURES, LabelSpec("y", "classification", classes=("no", "yes", "maybe")))
    t = totals(chunk([2.0, 2.0], ["a"], [0, 0]))
    assert notes(schema, t, CONFIG) == [
        "column 'n' is constant (2.0) in the training split (std 1 used)",
        "label class 'yes' has no good training row",
        "label class 'maybe' has no good training row",
    ]
    assert notes(schema, totals(chunk([], ["a"], [0, 1, 2])), CONFIG)[0] == (
        "column 'n' has no value in the training split (mean 0, std 1 used)"
    )


def test_separator_note_only_where_the_column_would_be_numeric_without_them():
    schema = Schema(FEATURES, LabelSpec("y", "classification", classes=CLASSES))
    noted = notes(schema, totals(chunk([1.0, 2.0], ["1,234.5"] * 5 + ["12"] * 4 + ["n/a"], [0, 1])), CONFIG)
    assert noted == [
        "column 'c' reads as categorical with 3 values because its numbers are written with thousands separators "
        "(such as '1,234.5'), which are not read as numbers; write them without separators ('1234.5') to make it "
        "numeric"
    ]
    for values in (["1,234"] * 8 + ["n/a"] * 2, ["1,2", "12,34", "a,b"]):  # too few numbers; not separators
        assert notes(schema, totals(chunk([1.0, 2.0], values, [0, 1])), CONFIG) == []


def test_summary_counts_per_split(merged):
    schema = build_schema(decisions(), merged, CONFIG)
    out = summary(schema, merged)
    assert out["missing"] == {
        "train": {"n": 3, "c": 0},
        "eval": {"n": 0, "c": 2},
        "test": {"n": 0, "c": 0},
        "valid": {"n": 0, "c": 0},
    }
    assert out["class_counts"]["train"] == {"no": 1, "yes": 3}
    assert out["class_counts"]["eval"] == {"no": 0, "yes": 0}
    regression = Schema(FEATURES, LabelSpec("y", "regression"))
    assert "class_counts" not in summary(regression, merged)


@pytest.mark.xfail(
    strict=True,
    reason="bug in data/stats.py notes(): a constant (or empty) numeric column continued from a reference schema "
    "keeps the reference's mean and std (build_schema), but the manifest note still says 'std 1 used'",
)
def test_notes_of_a_continued_constant_column_name_the_std_kept():
    old = (FeatureSpec("n", "f_n", NUMERIC, mean=10.0, std=4.0), FEATURES[1])
    reference = Schema(old, LabelSpec("y", "classification", classes=CLASSES))
    t = totals(chunk([2.0, 2.0], ["a"], [0, 1]))
    schema = build_schema(decisions(features=old, reference=reference), t, CONFIG)
    assert (schema.features[0].mean, schema.features[0].std) == (10.0, 4.0)
    assert "std 1 used" not in notes(schema, t, CONFIG)[0]
