"""Between the passes: types, task and classes decided from a tiny profile, duplicate keys found, the encode
plan's key order; exact messages for what cannot be decided."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from estimator_lib.config import PrepareConfig
from estimator_lib.data import plan, wire
from estimator_lib.data.common import DataError
from estimator_lib.data.profile import ColumnCounts, Profile


def _profile(label_train, **columns) -> Profile:
    """A pass-1 profile: columns as (present, numeric, whole); the label's training values (all rows alike)."""
    found = Profile(rows=10)
    for name, (present, numeric, whole) in columns.items():
        found.columns[name] = ColumnCounts(present, numeric, whole)
        found.first_seen[name] = ("d.csv", 2)
    found.label_train = collections.Counter(label_train)
    found.label_all = collections.Counter(label_train)
    return found


def _config(**changes) -> PrepareConfig:
    return PrepareConfig(data=("d.csv",), label="y", **changes)


def test_types_task_and_classes_are_inferred():
    found = _profile(
        {"yes": 6, "no": 4},
        **{"bill (mm)": (10, 9, 2), "island": (10, 1, 1), "a-b": (10, 10, 10), "y": (10, 0, 0)},
    )
    decided = plan.decide_schema(found, _config(), None)
    assert [(f.name, f.key, f.kind) for f in decided.features] == [
        ("bill (mm)", "f_bill_mm", "numeric"),  # 9 of 10 values are numbers: numeric, the other one is bad
        ("island", "f_island", "categorical"),
        ("a-b", "f_a_b", "numeric"),
    ]
    assert (decided.task, decided.classes, decided.whole_number_classes) == ("classification", ("no", "yes"), False)


def test_whole_number_labels_are_classes_in_numeric_order():
    found = _profile({"10": 3, "2": 3, "2.0": 1, "1": 3}, x=(10, 10, 0), y=(10, 10, 10))
    decided = plan.decide_schema(found, _config(), None)
    assert (decided.task, decided.classes, decided.whole_number_classes) == ("classification", ("1", "2", "10"), True)


def test_fractional_labels_are_regression():
    found = _profile({"1.5": 5, "2": 5}, x=(10, 10, 0), y=(10, 10, 5))
    assert plan.decide_schema(found, _config(), None).task == "regression"


def test_what_cannot_be_decided_is_named():
    with pytest.raises(DataError) as e:
        plan.decide_schema(_profile({}, x=(10, 10, 0)), _config(), None)
    assert str(e.value) == "label column 'y' is not in the input; the columns are ['x']"
    with pytest.raises(DataError) as e:
        plan.decide_schema(_profile({"a": 10}, x=(10, 10, 0), y=(10, 0, 0)), _config(), None)
    assert str(e.value) == (
        "label column 'y' has a single class 'a' in the training split (10 rows); classification needs at least 2 "
        "classes: check the label column, or set task='regression'"
    )
    with pytest.raises(DataError, match=r"^the input has no rows \(inputs: \['d.csv'\]\); check the files"):
        plan.decide_schema(Profile(), _config(), None)


def test_duplicate_keys_point_at_their_first_row():
    hashes = np.array([7, 3, 7, 9, 3, 7, 5], np.uint64)
    valid = np.array([True, True, True, True, True, True, False])
    assert plan.find_duplicates(hashes, valid) == {2: (0, 1), 5: (0, 2), 4: (1, 1)}
    lines = np.array([2, 3, 4, 2, 3], np.uint32)
    assert plan.row_place(3, lines, ["a.csv", "b.csv"], [0, 3]) == ("b.csv", 2)
    assert plan.row_place(2, lines, ["a.csv", "b.csv"], [0, 3]) == ("a.csv", 4)


def test_the_encode_plan_places_features_in_key_order():
    found = _profile({"yes": 5, "no": 5}, zeta=(10, 10, 0), alpha=(10, 0, 0), y=(10, 0, 0))
    encode_plan = plan.encode_plan(plan.decide_schema(found, _config(), None), _config())
    assert [(f.name, f.slot) for f in encode_plan.features] == [("zeta", 2), ("alpha", 1)]
    assert encode_plan.features[0].prefix == wire.float_entry_prefix("f_zeta")
    assert encode_plan.check_schema.label.classes == ("no", "yes")
