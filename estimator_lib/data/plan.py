"""Between the passes: decide the columns, their types, the task and the label classes from pass 1's profile
(or take them from a user-supplied schema, which is then enforced, or continue a reference schema), and find
duplicate keys.

Type inference: a feature column is numeric when at least `min_numeric_fraction` of its present values parse
as numbers (the others are then bad values), otherwise categorical text. The label is classification when
it is text, or whole numbers with at most `max_inferred_classes` distinct values; regression otherwise.

A reference schema (the schema of the published model a run warm-starts from or compares with) is continued:
its features keep their keys, kinds and order (a column the data lacks is read as missing in every row; a
column it does not list is left out), its task and its label classes in their order. What cannot be
continued fails here, before any row is encoded: a numeric feature whose values are no longer numbers, a label
class the reference does not have, another task.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from estimator_lib.config import PrepareConfig
from estimator_lib.data import numbers
from estimator_lib.data.common import DataError
from estimator_lib.data.encode import EncodePlan, FeaturePlan
from estimator_lib.data.profile import ColumnCounts, Profile
from estimator_lib.data.wire import float_entry_prefix
from estimator_lib.schema import (
    CATEGORICAL,
    CLASSIFICATION,
    NUMERIC,
    REGRESSION,
    FeatureSpec,
    LabelSpec,
    Schema,
    safe_key,
)


@dataclasses.dataclass(frozen=True)
class Decisions:
    """The dataset's shape before statistics: features (kinds, keys), task, classes, ignored columns."""

    features: Tuple[FeatureSpec, ...]
    task: str
    classes: Tuple[str, ...]
    whole_number_classes: bool
    ignored: Tuple[str, ...]
    supplied: Optional[Schema]
    reference: Optional[Schema] = None
    absent: Tuple[str, ...] = ()  # reference features the input lacks (read as missing in every row)


COLD_START = (
    "to train a new model on this data instead, start cold: --warm-start none --baseline none (its schema is "
    "then inferred from the data)"
)


def decide_schema(
    profile: Profile, config: "PrepareConfig", supplied: Optional[Schema], reference: Optional[Schema] = None
) -> Decisions:
    """Columns, types, task and classes for the input profiled in pass 1 (continuing `reference` if given)."""
    if profile.rows == 0:
        raise DataError(f"the input has no rows (inputs: {list(config.data)}); check the files are not empty")
    require_readable(profile)
    _require_column(profile, config.label, "label column")
    if config.key_column is not None:
        _require_column(profile, config.key_column, "key column")
    reserved = {config.label, config.key_column}
    if reference is not None:
        return continued_decisions(profile, config, reference, reserved)
    if supplied is None:
        features = infer_features(profile, config, reserved)
        ignored: Tuple[str, ...] = ()
    else:
        features, ignored = supplied_features(profile, config, supplied, reserved)
    task = decide_task(profile, config, supplied)
    classes, whole = decide_classes(profile, config, supplied, task)
    return Decisions(features, task, classes, whole, ignored, supplied)


def require_readable(profile: Profile) -> None:
    """Raises DataError naming the first record when no JSON Lines record could be read as a row (every one
    invalid JSON, not an object, or holding a nested value): the input then has no columns to name."""
    if not profile.columns and profile.unreadable is not None:
        raise DataError(f"no record of the input can be read as a row; the first: {profile.unreadable}")


def unread_rows(profile: Profile) -> str:
    """What a message about the input's columns adds when some records could not be read (their columns are
    not counted): the first of them."""
    if profile.unreadable is None:
        return ""
    return f"; records that cannot be read add no column, the first: {profile.unreadable}"


def _require_column(profile: Profile, name: str, role: str) -> None:
    if name not in profile.columns:
        raise DataError(
            f"{role} {name!r} is not in the input; the columns are {list(profile.columns)}{unread_rows(profile)}"
        )


def is_numeric(counts: ColumnCounts, config: "PrepareConfig") -> bool:
    return counts.numeric >= config.min_numeric_fraction * counts.present


def infer_features(profile: Profile, config: "PrepareConfig", reserved: set) -> Tuple[FeatureSpec, ...]:
    features: List[FeatureSpec] = []
    for name, counts in profile.columns.items():
        if name in reserved:
            continue
        key = safe_key(name, [f.key for f in features])
        kind = NUMERIC if is_numeric(counts, config) else CATEGORICAL
        features.append(FeatureSpec(name, key, kind, value_type="float" if kind == NUMERIC else "string"))
    return tuple(features)


def supplied_features(
    profile: Profile, config: "PrepareConfig", schema: Schema, reserved: set
) -> Tuple[Tuple[FeatureSpec, ...], Tuple[str, ...]]:
    """The supplied schema's features, after checking the data's columns against it."""
    absent = [f.name for f in schema.features if f.name not in profile.columns]
    if absent:
        raise DataError(
            f"column(s) {absent} of the schema {config.schema_uri} are not in the input; the input has "
            f"{list(profile.columns)}"
        )
    known = {f.name for f in schema.features} | reserved
    unknown = [name for name in profile.columns if name not in known]
    if unknown and config.unknown_columns == "fail":
        file_name, line = profile.first_seen[unknown[0]]
        raise DataError(
            f"{file_name} line {line}: column(s) {unknown} are not in the schema {config.schema_uri}; add them "
            "to the schema, remove them from the data, or set unknown_columns='ignore'"
        )
    return schema.features, tuple(unknown)


def continued_decisions(profile: Profile, config: "PrepareConfig", reference: Schema, reserved: set) -> Decisions:
    """The reference's features, task and classes, after checking the data can continue them."""
    if config.label != reference.label.name:
        raise DataError(
            f"label {config.label!r} differs from the published model's label {reference.label.name!r}; a warm start "
            f"or comparison needs the same label: {COLD_START}"
        )
    if config.task is not None and config.task != reference.label.task:
        raise DataError(
            f"task={config.task!r} differs from the published model's task {reference.label.task!r}; {COLD_START}"
        )
    for f in reference.features:
        counts = profile.columns.get(f.name)
        if f.kind == NUMERIC and counts is not None and counts.present and not is_numeric(counts, config):
            share = counts.numeric / counts.present
            raise DataError(
                f"column {f.name!r} was numeric in the published model's data but only {share:.0%} of its values "
                f"are numbers now (retyped; min_numeric_fraction={config.min_numeric_fraction}): fix the column's "
                f"values, or {COLD_START}"
            )
    known = {f.name for f in reference.features} | reserved
    ignored = tuple(name for name in profile.columns if name not in known)
    absent = tuple(f.name for f in reference.features if f.name not in profile.columns)
    classes, whole = continued_classes(profile, config, reference)
    return Decisions(reference.features, reference.label.task, classes, whole, ignored, None, reference, absent)


def continued_classes(profile: Profile, config: "PrepareConfig", reference: Schema) -> Tuple[Tuple[str, ...], bool]:
    """The reference's classes in their order; a label value outside them fails, naming it."""
    if reference.label.task != CLASSIFICATION:
        return (), False
    classes = reference.label.classes
    whole = all(_whole(c) == c for c in classes)
    seen = {(_whole(v) or v) if whole else v for v in profile.label_all}
    new = sorted(seen - set(classes))
    if new:
        raise DataError(
            f"label column {config.label!r} has class(es) {new} that the published model does not know (its "
            f"classes: {list(classes)}); a warm start or comparison cannot add a class: drop those rows, or "
            f"{COLD_START}"
        )
    return classes, whole


def decide_task(profile: Profile, config: "PrepareConfig", supplied: Optional[Schema]) -> str:
    if supplied is not None:
        if config.task is not None and config.task != supplied.label.task:
            raise DataError(
                f"task={config.task!r} disagrees with the schema's label task {supplied.label.task!r}; drop one of them"
            )
        return supplied.label.task
    if config.task is not None:
        return config.task
    counts = profile.columns[config.label]
    if counts.present == 0:
        raise DataError(f"label column {config.label!r} has no value in any row")
    if not is_numeric(counts, config):
        return CLASSIFICATION
    few = not profile.label_overflow and len(profile.label_all) <= config.max_inferred_classes
    return CLASSIFICATION if counts.integer == counts.numeric and few else REGRESSION


def decide_classes(
    profile: Profile, config: "PrepareConfig", supplied: Optional[Schema], task: str
) -> Tuple[Tuple[str, ...], bool]:
    """(classes in index order, whether they are whole numbers) for classification; ((), False) otherwise."""
    if task != CLASSIFICATION:
        return (), False
    if supplied is not None:
        classes = supplied.label.classes
        return classes, all(_whole(c) == c for c in classes)
    if profile.label_overflow:
        raise DataError(
            f"label column {config.label!r} has more than {config.max_classes} distinct values; classification "
            "supports at most max_classes classes (raise max_classes, or set task='regression')"
        )
    counts = profile.columns[config.label]
    whole = counts.numeric > 0 and is_numeric(counts, config)
    seen = {_whole(v) if whole else v for v in profile.label_train}
    classes = sorted(c for c in seen if c is not None)
    if whole:
        classes.sort(key=int)
    _check_classes(classes, profile, config)
    return tuple(classes), whole


def _whole(text: str) -> Optional[str]:
    """The canonical text of a whole number ("3.0" -> "3"); None for other text."""
    number = numbers.read(text)
    return None if number is None else numbers.whole_text(number)


def _check_classes(classes: Sequence[str], profile: Profile, config: "PrepareConfig") -> None:
    rows = sum(profile.label_train.values())
    if not classes:
        raise DataError(f"no training row has a usable value in label column {config.label!r}")
    if len(classes) == 1:
        raise DataError(
            f"label column {config.label!r} has a single class {classes[0]!r} in the training split ({rows} rows); "
            "classification needs at least 2 classes: check the label column, or set task='regression'"
        )


def find_duplicates(hashes: np.ndarray, valid: np.ndarray) -> Dict[int, Tuple[int, int]]:
    """{row: (first row with the same key hash, occurrence number)} for every repeated key (numpy, O(n log n)).

    `hashes` (uint64) and `valid` (bool) are pass 1's per-row key hashes and usable-key flags, [rows]."""
    rows = np.flatnonzero(valid)
    order = rows[np.argsort(hashes[rows], kind="stable")]
    sorted_hashes = hashes[order]
    repeated = np.flatnonzero(sorted_hashes[1:] == sorted_hashes[:-1]) + 1
    out: Dict[int, Tuple[int, int]] = {}
    for position in repeated.tolist():
        first, occurrence = out.get(int(order[position - 1]), (int(order[position - 1]), 0))
        out[int(order[position])] = (first, occurrence + 1)
    return out


def row_place(row: int, profile_lines: np.ndarray, names: Sequence[str], file_starts: Sequence[int]) -> Tuple[str, int]:
    """(file name, line) of a row index."""
    file_index = int(np.searchsorted(np.asarray(file_starts), row, side="right")) - 1
    return names[file_index], int(profile_lines[row])


def encode_plan(decisions: Decisions, config: "PrepareConfig") -> EncodePlan:
    order = sorted(range(len(decisions.features)), key=lambda i: decisions.features[i].key)
    slots = {index: slot + 1 for slot, index in enumerate(order)}  # slot 0: example_key; last: label
    features = tuple(
        FeaturePlan(f.name, f.key, f.kind, f.value_type, i, slots[i], float_entry_prefix(f.key))
        for i, f in enumerate(decisions.features)
    )
    return EncodePlan(
        features=features,
        label=config.label,
        task=decisions.task,
        classes=decisions.classes,
        whole_number_classes=decisions.whole_number_classes,
        key_column=config.key_column,
        missing=frozenset(config.missing_values),
        eval_fraction=config.eval_fraction,
        test_fraction=config.test_fraction,
        valid_fraction=config.valid_fraction,
        check_schema=_check_schema(decisions, config),
    )


def _check_schema(decisions: Decisions, config: "PrepareConfig") -> Schema:
    """A schema with placeholder statistics: enough for records.serialize_example (statistics do not matter)."""
    features = tuple(dataclasses.replace(f, vocabulary=(), mean=0.0, std=1.0) for f in decisions.features)
    if decisions.task == CLASSIFICATION:
        label = LabelSpec(config.label, CLASSIFICATION, classes=decisions.classes)
    else:
        label = LabelSpec(config.label, REGRESSION)
    return Schema(features, label, config.key_column)
