"""data/plan.py: type inference, task and classes, supplied and reference schemas, duplicate keys, the encode
plan. Pass 1's profile is built by hand, so each decision is tested on exactly the counts it reads."""

from __future__ import annotations

import collections
from typing import Dict, Optional, Tuple

import numpy as np
import pytest

from estimator_lib.config import PrepareConfig
from estimator_lib.data.common import DataError
from estimator_lib.data.plan import (
    COLD_START,
    decide_schema,
    encode_plan,
    find_duplicates,
    row_place,
)
from estimator_lib.data.profile import ColumnCounts, Profile
from estimator_lib.data.wire import float_entry_prefix
from estimator_lib.schema import CATEGORICAL, NUMERIC, FeatureSpec, LabelSpec, Schema


def config(**kwargs) -> PrepareConfig:
    return PrepareConfig(**{"data": ("in.csv",), "label": "y", **kwargs})


def profile(
    columns: Dict[str, Tuple[int, int, int]],
    labels: Dict[str, int],
    rows: int = 10,
    train: Optional[Dict[str, int]] = None,
    overflow: bool = False,
) -> Profile:
    """A pass-1 profile: {column: (present, numeric, integer)} and the label values seen (all rows; training
    rows default to the same)."""
    return Profile(
        rows=rows,
        columns={name: ColumnCounts(*counts) for name, counts in columns.items()},
        first_seen={name: ("in.csv", 2 + i) for i, name in enumerate(columns)},
        label_all=collections.Counter(labels),
        label_train=collections.Counter(labels if train is None else train),
        label_overflow=overflow,
    )


TEXT_LABEL = {"y": (10, 0, 0)}
CAT_LABELS = {"cat": 6, "dog": 4}


# -- failures before any decision ----------------------------------------------------------------------------
def test_no_rows_names_the_inputs():
    with pytest.raises(
        DataError, match=r"the input has no rows \(inputs: \['in.csv'\]\); check the files are not empty"
    ):
        decide_schema(profile({"y": (0, 0, 0)}, {}, rows=0), config(), None)


def test_missing_label_column_lists_the_columns():
    with pytest.raises(DataError) as e:
        decide_schema(profile({"a": (10, 10, 10)}, {}), config(), None)
    assert str(e.value) == "label column 'y' is not in the input; the columns are ['a']"


def test_missing_key_column():
    with pytest.raises(DataError, match="key column 'id' is not in the input; the columns are"):
        decide_schema(profile({"a": (10, 10, 10), **TEXT_LABEL}, CAT_LABELS), config(key_column="id"), None)


# -- type inference ------------------------------------------------------------------------------------------
def test_numeric_fraction_threshold_and_safe_keys():
    columns = {"Body Mass (g)": (10, 9, 9), "island": (10, 8, 0), "ID": (10, 10, 10), "id": (10, 0, 0), **TEXT_LABEL}
    d = decide_schema(profile(columns, CAT_LABELS), config(key_column="ID"), None)
    assert [(f.name, f.key, f.kind, f.value_type) for f in d.features] == [
        ("Body Mass (g)", "f_body_mass_g", NUMERIC, "float"),  # 9 of 10 numbers: 0.9 >= min_numeric_fraction
        ("island", "f_island", CATEGORICAL, "string"),  # 8 of 10: below, so text
        ("id", "f_id", CATEGORICAL, "string"),  # the key column "ID" is left out, so "id" keeps f_id
    ]
    assert d.ignored == () and d.supplied is None and d.reference is None and d.absent == ()


def test_colliding_safe_keys_are_numbered():
    d = decide_schema(profile({"A b": (3, 3, 3), "a-b": (3, 3, 3), **TEXT_LABEL}, CAT_LABELS), config(), None)
    assert [f.key for f in d.features] == ["f_a_b", "f_a_b_2"]


# -- task and classes ----------------------------------------------------------------------------------------
def test_text_label_is_classification_sorted_by_text():
    d = decide_schema(profile({"a": (10, 10, 0), **TEXT_LABEL}, {"dog": 4, "cat": 6}), config(), None)
    assert (d.task, d.classes, d.whole_number_classes) == ("classification", ("cat", "dog"), False)


def test_few_whole_numbers_are_classes_in_numeric_order():
    labels = {"10": 2, "2.0": 3, "1": 5}
    d = decide_schema(profile({"a": (10, 10, 0), "y": (10, 10, 10)}, labels), config(), None)
    assert (d.task, d.classes, d.whole_number_classes) == ("classification", ("1", "2", "10"), True)


def test_fractions_or_many_whole_numbers_are_regression():
    fractions = profile({"a": (10, 10, 0), "y": (10, 10, 9)}, {"1": 9, "1.5": 1})
    d = decide_schema(fractions, config(), None)
    assert (d.task, d.classes) == ("regression", ())
    many = profile({"a": (10, 10, 0), "y": (10, 10, 10)}, {str(i): 1 for i in range(4)})
    d = decide_schema(many, config(max_inferred_classes=3), None)
    assert (d.task, d.classes, d.whole_number_classes) == ("regression", (), False)


def test_configured_task_wins_over_inference():
    d = decide_schema(profile({"a": (10, 10, 0), "y": (10, 10, 10)}, {"1": 5, "2": 5}), config(task="regression"), None)
    assert d.task == "regression"


def test_label_without_values_fails():
    with pytest.raises(DataError, match="label column 'y' has no value in any row"):
        decide_schema(profile({"a": (10, 10, 0), "y": (0, 0, 0)}, {}), config(), None)


def test_single_class_fails_with_the_fix():
    with pytest.raises(DataError) as e:
        decide_schema(profile({"a": (10, 10, 0), **TEXT_LABEL}, {"cat": 10}), config(), None)
    assert str(e.value) == (
        "label column 'y' has a single class 'cat' in the training split (10 rows); classification needs at least "
        "2 classes: check the label column, or set task='regression'"
    )


def test_no_training_label_fails():
    with pytest.raises(DataError, match="no training row has a usable value in label column 'y'"):
        decide_schema(profile({"a": (10, 10, 0), **TEXT_LABEL}, {"cat": 3}, train={}), config(), None)


def test_too_many_classes_fails():
    with pytest.raises(DataError) as e:
        decide_schema(profile({"a": (10, 10, 0), **TEXT_LABEL}, CAT_LABELS, overflow=True), config(max_classes=7), None)
    assert "has more than 7 distinct values" in str(e.value) and "raise max_classes, or set task='regression'" in str(
        e.value
    )


# -- a supplied schema ---------------------------------------------------------------------------------------
SUPPLIED = Schema(
    (FeatureSpec("a", "f_a", NUMERIC), FeatureSpec("b", "f_b", CATEGORICAL, value_type="string")),
    LabelSpec("y", "classification", classes=("dog", "cat")),
)


def test_supplied_schema_keeps_its_features_and_classes():
    columns = {"a": (10, 10, 0), "b": (10, 0, 0), "extra": (10, 0, 0), **TEXT_LABEL}
    d = decide_schema(profile(columns, CAT_LABELS), config(unknown_columns="ignore"), SUPPLIED)
    assert d.features == SUPPLIED.features and d.ignored == ("extra",) and d.supplied is SUPPLIED
    assert (d.task, d.classes, d.whole_number_classes) == ("classification", ("dog", "cat"), False)


def test_supplied_schema_column_absent_from_the_input():
    with pytest.raises(DataError) as e:
        decide_schema(profile({"a": (10, 10, 0), **TEXT_LABEL}, CAT_LABELS), config(schema_uri="s.json"), SUPPLIED)
    assert str(e.value) == "column(s) ['b'] of the schema s.json are not in the input; the input has ['a', 'y']"


def test_supplied_schema_unknown_column_names_file_and_line():
    columns = {"a": (10, 10, 0), "b": (10, 0, 0), "extra": (10, 0, 0), **TEXT_LABEL}
    with pytest.raises(DataError) as e:
        decide_schema(profile(columns, CAT_LABELS), config(schema_uri="s.json"), SUPPLIED)
    assert str(e.value).startswith("in.csv line 4: column(s) ['extra'] are not in the schema s.json")
    assert str(e.value).endswith("or set unknown_columns='ignore'")


def test_supplied_schema_task_disagreement():
    columns = {"a": (10, 10, 0), "b": (10, 0, 0), **TEXT_LABEL}
    with pytest.raises(DataError, match="task='regression' disagrees with the schema's label task 'classification'"):
        decide_schema(profile(columns, CAT_LABELS), config(task="regression"), SUPPLIED)


# -- a reference schema (continued) --------------------------------------------------------------------------
REFERENCE = Schema(
    (
        FeatureSpec("a", "f_a", NUMERIC, mean=3.0, std=2.0),
        FeatureSpec("gone", "f_gone", CATEGORICAL, value_type="string", vocabulary=("x",)),
    ),
    LabelSpec("y", "classification", classes=("3", "1")),
)


def test_reference_is_continued_with_absent_and_ignored_columns():
    columns = {"new": (10, 10, 10), "a": (10, 10, 0), "y": (10, 10, 10)}
    d = decide_schema(profile(columns, {"1.0": 4, "3": 6}), config(), None, reference=REFERENCE)
    assert d.features == REFERENCE.features and d.reference is REFERENCE and d.supplied is None
    assert (d.absent, d.ignored) == (("gone",), ("new",))
    assert (d.task, d.classes, d.whole_number_classes) == ("classification", ("3", "1"), True)


def test_reference_refuses_another_label_task_or_retyped_column():
    columns = {"a": (10, 10, 0), "z": (10, 0, 0), "y": (10, 10, 10)}
    with pytest.raises(DataError) as e:
        decide_schema(profile(columns, {"1": 10}), config(label="z"), None, reference=REFERENCE)
    assert str(e.value).startswith("label 'z' differs from the published model's label 'y'")
    assert str(e.value).endswith(COLD_START)
    with pytest.raises(DataError, match="task='regression' differs from the published model's task 'classification'"):
        decide_schema(profile(columns, {"1": 10}), config(task="regression"), None, reference=REFERENCE)
    retyped = {"a": (10, 5, 0), "y": (10, 10, 10)}
    with pytest.raises(DataError) as e:
        decide_schema(profile(retyped, {"1": 10}), config(), None, reference=REFERENCE)
    assert "column 'a' was numeric in the published model's data but only 50% of its values are numbers now" in str(
        e.value
    )


def test_reference_refuses_a_new_class():
    with pytest.raises(DataError) as e:
        decide_schema(profile({"a": (10, 10, 0), "y": (10, 10, 10)}, {"1": 5, "7": 5}), config(), None, REFERENCE)
    assert (
        "label column 'y' has class(es) ['7'] that the published model does not know (its classes: ['3', '1'])"
        in str(e.value)
    )


# -- duplicate keys and row places ---------------------------------------------------------------------------
def test_find_duplicates_numbers_occurrences_and_skips_invalid_rows():
    hashes = np.array([5, 7, 5, 5, 7, 5], dtype=np.uint64)
    valid = np.array([True, True, True, True, True, False])
    assert find_duplicates(hashes, valid) == {2: (0, 1), 3: (0, 2), 4: (1, 1)}


def test_find_duplicates_of_unique_and_empty_input():
    assert find_duplicates(np.array([3, 1, 2], dtype=np.uint64), np.ones(3, bool)) == {}
    assert find_duplicates(np.zeros(0, dtype=np.uint64), np.zeros(0, bool)) == {}


def test_row_place_finds_the_file_of_a_row():
    lines = np.array([2, 3, 4, 2, 3], dtype=np.uint32)
    assert row_place(1, lines, ["a.csv", "b.csv"], [0, 3]) == ("a.csv", 3)
    assert row_place(3, lines, ["a.csv", "b.csv"], [0, 3]) == ("b.csv", 2)


# -- the encode plan -----------------------------------------------------------------------------------------
def test_encode_plan_slots_follow_key_order():
    columns = {"zeta": (10, 10, 0), "alpha": (10, 0, 0), **TEXT_LABEL}
    c = config(eval_fraction=0.25, test_fraction=0.1, valid_fraction=0.05)
    plan = encode_plan(decide_schema(profile(columns, CAT_LABELS), c, None), c)
    assert [(f.key, f.index, f.slot) for f in plan.features] == [("f_zeta", 0, 2), ("f_alpha", 1, 1)]
    assert plan.features[0].prefix == float_entry_prefix("f_zeta")
    assert (plan.task, plan.classes, plan.label) == ("classification", ("cat", "dog"), "y")
    assert (plan.eval_fraction, plan.test_fraction, plan.valid_fraction) == (0.25, 0.1, 0.05)
    check = plan.check_schema
    assert check.label == LabelSpec("y", "classification", classes=("cat", "dog"))
    assert [(f.mean, f.std, f.vocabulary) for f in check.features] == [(0.0, 1.0, ()), (0.0, 1.0, ())]


@pytest.mark.xfail(
    strict=True,
    reason="bug in data/plan.py decide_task: 'few' counts distinct label texts (profile.label_all), not distinct "
    "whole numbers, so a label written both as 1 and 1.0 counts each class twice and is inferred as regression "
    "(seen end to end through prepare on a CSV of 40 rows)",
)
def test_whole_number_classes_written_two_ways_count_once():
    labels = {"1": 5, "1.0": 3, "2": 4, "2.0": 1}  # two classes, four texts
    d = decide_schema(
        profile({"a": (13, 13, 0), "y": (13, 13, 13)}, labels, rows=13), config(max_inferred_classes=3), None
    )
    assert (d.task, d.classes) == ("classification", ("1", "2"))
