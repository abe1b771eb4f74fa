"""Pass 2 of preparation: check every row against the decided schema, encode it, gather training statistics.

A worker turns one chunk into serialized Examples per split (in row order), the chunk's bad rows (each with
file, line, column, value and reason), and partial statistics over the good rows. Statistics are
computed from exactly the rows that are written, so bad rows never leak into the schema.

Scoring (`prepare.encode_for_scoring`) runs the same code with `optional_label`: a row without a label is
good, and a label that is present and valid is written while a missing or invalid one is left out.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Tuple

from estimator_lib.data import records, wire
from estimator_lib.data.common import SPLITS, Moments, derived_key, split_index, where
from estimator_lib.data.read import CSV, BadRecord, Chunk, csv_values, json_values, raw_row
from estimator_lib.data.read import records as read_records
from estimator_lib.schema import CLASSIFICATION, NUMERIC, Schema


@dataclasses.dataclass(frozen=True)
class FeaturePlan:
    name: str
    key: str
    kind: str
    value_type: str
    index: int  # position in the schema's features (statistics)
    slot: int  # position in key order (the Example's map entries are sorted by key)
    prefix: bytes  # float_entry_prefix(key) for numerics


@dataclasses.dataclass(frozen=True)
class EncodePlan:
    """Everything pass 2 needs, decided after pass 1 (sent once to each worker)."""

    features: Tuple[FeaturePlan, ...]
    label: str
    task: str
    classes: Tuple[str, ...]
    whole_number_classes: bool
    key_column: Optional[str]
    missing: FrozenSet[str]
    eval_fraction: float
    test_fraction: float
    valid_fraction: float
    check_schema: Schema  # for comparing the first row of each chunk with records.encode_example
    # Scoring: rows need no label; a present, valid label is written, a missing or invalid one left out.
    optional_label: bool = False

    @property
    def class_index(self) -> Dict[str, int]:
        cached = self.__dict__.get("_class_index")
        if cached is None:
            cached = {c: i for i, c in enumerate(self.classes)}
            object.__setattr__(self, "_class_index", cached)
        return cached


@dataclasses.dataclass(frozen=True)
class ChunkTask:
    """A chunk and its rows' facts from pass 1: the first row's index and, for those rows, the duplicates
    ({row: (file, line) of the first row with that key}) or occurrence numbers of repeated content."""

    chunk: Chunk
    first_row: int
    duplicates: Mapping[int, Tuple[str, int]]
    occurrences: Mapping[int, int]
    key_hashes: Any  # numpy uint64 [rows of the chunk]: pass 1's key (or content) hashes


@dataclasses.dataclass
class ChunkResult:
    """Encoded rows per split, bad rows, and partial statistics over good rows (merged in order)."""

    rows: int = 0
    examples: Tuple[List[bytes], ...] = ((), (), (), ())  # type: ignore[assignment]
    bad: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    missing: List[List[int]] = dataclasses.field(default_factory=list)  # [split][feature index]
    numeric: Dict[int, Moments] = dataclasses.field(default_factory=dict)  # training rows
    categories: Dict[int, collections.Counter] = dataclasses.field(default_factory=dict)  # training rows
    class_counts: List[collections.Counter] = dataclasses.field(default_factory=list)  # [split]
    label_moments: Moments = dataclasses.field(default_factory=Moments)  # training rows, regression
    labelled: int = 0  # good rows with a label (all of them unless the label is optional)


class BadValue(Exception):
    def __init__(self, column: Optional[str], value: Any, expected: str):
        super().__init__(expected)
        self.column, self.value, self.expected = column, value, expected


_PLAN: Optional[EncodePlan] = None


def init_worker(plan: EncodePlan) -> None:
    global _PLAN
    _PLAN = plan
    _entry_cache.clear()


def encode_chunk(task: ChunkTask) -> ChunkResult:
    """Checks and encodes one chunk (runs in a worker process; `init_worker` set the plan)."""
    plan = _PLAN
    assert plan is not None, "init_worker was not called"
    chunk = task.chunk
    out = _empty_result(plan)
    collected: List[Tuple[List[Optional[float]], ...]] = []
    checked = False
    for offset, (line, record) in enumerate(read_records(chunk)):
        row = task.first_row + offset
        out.rows += 1
        try:
            values = _values(record, chunk, plan)
            split, key = _split_and_key(values, row, int(task.key_hashes[offset]), task, plan)
            typed, serialized = _encode_row(values, key, plan)
        except (BadRecord, BadValue) as e:
            out.bad.append(_bad_row(e, chunk, line, record))
            continue
        if not checked:
            _check_against_records(typed, key, serialized, plan, chunk, line)
            checked = True
        out.examples[split].append(serialized)
        _tally(out, typed, split, plan, collected)
    _finish_numeric(out, collected, plan)
    return out


def _empty_result(plan: EncodePlan) -> ChunkResult:
    n = len(plan.features)
    return ChunkResult(
        examples=tuple([] for _ in SPLITS),
        missing=[[0] * n for _ in SPLITS],
        categories={f.index: collections.Counter() for f in plan.features if f.kind != NUMERIC},
        class_counts=[collections.Counter() for _ in SPLITS],
    )


def _values(record: Any, chunk: Chunk, plan: EncodePlan) -> Dict[str, Optional[str]]:
    if chunk.fmt == CSV:
        return dict(zip(chunk.columns, csv_values(record, chunk.columns, plan.missing)))
    return json_values(record, plan.missing)


def _split_and_key(
    values: Dict[str, Optional[str]], row: int, key_hash: int, task: ChunkTask, plan: EncodePlan
) -> Tuple[int, str]:
    label = values.get(plan.label)
    if label is None and not plan.optional_label:
        raise BadValue(plan.label, None, f"the label is missing (missing-value tokens: {sorted(plan.missing)})")
    split = split_index(key_hash, plan.eval_fraction, plan.test_fraction, plan.valid_fraction)
    if plan.key_column is None:
        return split, derived_key(key_hash, task.occurrences.get(row, 0))
    key = values.get(plan.key_column)
    if key is None:
        raise BadValue(plan.key_column, None, "the key is missing (every row needs a unique key)")
    if row in task.duplicates:
        first_file, first_line = task.duplicates[row]
        raise BadValue(
            plan.key_column,
            key,
            f"duplicate key {key!r} (first seen at {first_file} line {first_line}); keys must be unique",
        )
    return split, key


_CACHE_LIMIT = 10_000
_pack = wire.float32
_entry_cache: Dict[Tuple[str, str], bytes] = {}


def _encode_row(values: Dict[str, Optional[str]], key: str, plan: EncodePlan) -> Tuple[List[Any], bytes]:
    """(typed values, serialized Example). The fast path handles good rows; any problem falls back to the
    precise path (`_typed`), which names the column and the expectation."""
    try:
        return _fast_row(values, key, plan)
    except (ValueError, OverflowError, KeyError, BadValue):
        typed = _typed(values, plan)  # raises BadValue for the row's first bad value
        return typed, _serialize(typed, key, plan)


def _fast_row(values: Dict[str, Optional[str]], key: str, plan: EncodePlan) -> Tuple[List[Any], bytes]:
    entries: List[bytes] = [b""] * (len(plan.features) + 2)
    entries[0] = wire.key_entry(key)
    typed: List[Any] = []
    for f in plan.features:
        text = values.get(f.name)
        if text is None:
            typed.append(None)
        elif f.kind == NUMERIC:
            number = float(text)
            if number - number != 0:  # NaN or infinity
                raise ValueError(text)
            entries[f.slot] = f.prefix + _pack(number)
            typed.append(number)
        elif f.value_type == "int":
            raise KeyError(text)  # rare: the precise path canonicalises whole numbers
        else:
            entries[f.slot] = _category_entry(f.key, text)
            typed.append(text)
    label = values.get(plan.label)
    if label is None:  # only with optional_label: the Example has no label entry
        typed.append(None)
    elif plan.task == CLASSIFICATION:
        index = plan.class_index[_whole_number(plan.label, label, "") if plan.whole_number_classes else label]
        entries[-1] = wire.label_entry(wire.int64_feature(index))
        typed.append(index)
    else:
        number = _number(plan.label, label, "")
        entries[-1] = wire.label_entry(wire.float_feature(number))
        typed.append(number)
    return typed, wire.example(entries)


def _category_entry(key: str, text: str) -> bytes:
    cached = _entry_cache.get((key, text))
    if cached is None:
        cached = wire.entry(key, wire.bytes_feature(text.encode("utf-8")))
        if len(_entry_cache) < _CACHE_LIMIT:
            _entry_cache[(key, text)] = cached
    return cached


def _typed(values: Dict[str, Optional[str]], plan: EncodePlan) -> List[Any]:
    """[feature values in schema order (float / canonical text / None)..., label (class index or float)]."""
    typed: List[Any] = []
    for f in plan.features:
        text = values.get(f.name)
        if text is None:
            typed.append(None)
        elif f.kind == NUMERIC:
            typed.append(_number(f.name, text, "the column is numeric"))
        elif f.value_type == "int":
            typed.append(_whole_number(f.name, text, "the column is an integer categorical"))
        else:
            typed.append(text)
    typed.append(_scored_label(values.get(plan.label), plan))
    return typed


def _scored_label(text: Optional[str], plan: EncodePlan) -> Any:
    """The label's class index or number; None (left out) when it is optional and missing or invalid."""
    if not plan.optional_label:
        return _label(text, plan)  # type: ignore[arg-type]
    if text is None:
        return None
    try:
        return _label(text, plan)
    except BadValue:
        return None


def _number(column: str, text: str, why: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise BadValue(column, text, f"{text!r} is not a number ({why})") from None
    if not math.isfinite(number):
        raise BadValue(
            column,
            text,
            f"{text!r} is not a finite number ({why}; write a missing-value token such as NA instead)",
        )
    try:
        wire.float32(number)
    except OverflowError:
        raise BadValue(column, text, f"{text!r} is outside the float32 range ({why}; |x| must be < 3.4e38)") from None
    return number


def _whole_number(column: str, text: str, why: str) -> str:
    number = _number(column, text, why)
    if not number.is_integer():
        raise BadValue(column, text, f"{text!r} is not a whole number ({why})")
    return str(int(number))


def _label(text: str, plan: EncodePlan) -> Any:
    if plan.task != CLASSIFICATION:
        return _number(plan.label, text, "the label is numeric: task='regression'")
    if plan.whole_number_classes:
        text = _whole_number(plan.label, text, "the label's classes are whole numbers")
    index = plan.class_index.get(text)
    if index is None:
        raise BadValue(
            plan.label,
            text,
            f"{text!r} is not one of the label classes {list(plan.classes)} (from the training split)",
        )
    return index


def _serialize(typed: List[Any], key: str, plan: EncodePlan) -> bytes:
    entries: List[bytes] = [b""] * (len(plan.features) + 2)
    entries[0] = wire.key_entry(key)
    for f, value in zip(plan.features, typed):
        if value is None:
            continue
        if f.kind == NUMERIC:
            entries[f.slot] = f.prefix + wire.float32(value)
        else:
            entries[f.slot] = _category_entry(f.key, value)
    label = typed[-1]
    if label is not None:
        feature = wire.int64_feature(label) if plan.task == CLASSIFICATION else wire.float_feature(label)
        entries[-1] = wire.label_entry(feature)
    return wire.example(entries)


def _check_against_records(
    typed: List[Any], key: str, serialized: bytes, plan: EncodePlan, chunk: Chunk, line: int
) -> None:
    """Guards the wire-format encoder: the chunk's first good row must parse to records.encode_example's Example.

    Messages are compared, not bytes: protobuf's own deterministic order puts a key before the keys it is a
    prefix of ("f_a_b_2" before "f_a_b"), while ours is plain key order."""
    row = {f.name: v for f, v in zip(plan.features, typed)}
    label = typed[-1]
    row[plan.label] = plan.classes[label] if plan.task == CLASSIFICATION and label is not None else label
    example = records.encode_example(row, plan.check_schema, key, with_label=label is not None)
    if type(example).FromString(serialized) != example:
        raise AssertionError(f"{where(chunk.file_name, line)}: the fast encoder disagrees with records.encode_example")


def _tally(out: ChunkResult, typed: List[Any], split: int, plan: EncodePlan, collected: List) -> None:
    missing = out.missing[split]
    for f, value in zip(plan.features, typed):
        if value is None:
            missing[f.index] += 1
        elif split == 0 and f.kind != NUMERIC:
            out.categories[f.index][value] += 1
    if typed[-1] is not None:
        out.labelled += 1
        if plan.task == CLASSIFICATION:
            out.class_counts[split][typed[-1]] += 1
    if split == 0:
        collected.append(typed)


def _finish_numeric(out: ChunkResult, collected: List[List[Any]], plan: EncodePlan) -> None:
    for f in plan.features:
        if f.kind == NUMERIC:
            out.numeric[f.index] = Moments.of([row[f.index] for row in collected if row[f.index] is not None])
    if plan.task != CLASSIFICATION:
        out.label_moments = Moments.of([row[-1] for row in collected if row[-1] is not None])


def _bad_row(error: Exception, chunk: Chunk, line: int, record: Any) -> Dict[str, Any]:
    column = getattr(error, "column", None)
    value = getattr(error, "value", None)
    if isinstance(error, BadRecord) and column is None:
        reason = f"{where(chunk.file_name, line)}: the record {error.reason}"
    else:
        detail = error.expected if isinstance(error, BadValue) else error.reason  # type: ignore[attr-defined]
        reason = f"{where(chunk.file_name, line, column)}: {detail}"
    return {
        "file": chunk.file_name,
        "line": line,
        "column": column,
        "value": value,
        "reason": reason,
        "row": raw_row(record, chunk.columns),
    }
