"""Pass 2 of preparation: check every row against the decided schema, encode it, gather training statistics.

A worker turns one chunk into serialized Examples per split (in row order), the chunk's bad rows (each with
file, line, column, value and reason), its unlabelled rows (readable, the label missing: set aside, neither bad
nor written), and partial statistics over the good rows. Statistics are computed from exactly the rows that are
written, so bad and unlabelled rows never leak into the schema.

Scoring (`prepare.encode_for_scoring`) runs the same code with `optional_label`: a row without a label is
good, and a label that is present and valid is written while a missing or invalid one is left out.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from estimator_lib.data import arrow_csv, numbers, records, wire
from estimator_lib.data.combine import NumericStats
from estimator_lib.data.common import SPLITS, derived_key, split_index, split_indices, where
from estimator_lib.data.parallel import WorkerPlan
from estimator_lib.data.read import CSV, BadRecord, Chunk, csv_records, csv_rows, raw_row, row_values
from estimator_lib.data.read import records as read_records
from estimator_lib.data.tfrecord import frame
from estimator_lib.schema import CLASSIFICATION, LABEL_KEY, NUMERIC, Schema


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
    check_schema: Schema  # for comparing the first row of each chunk with records.serialize_example
    # Scoring: rows need no label; a present, valid label is written, a missing or invalid one left out.
    optional_label: bool = False
    # Each chunk also returns its training rows' numeric values (ChunkResult.train_numbers), for the profile.
    train_numbers: bool = False

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
    """Encoded rows per split (TFRecord-framed serialized Examples: `tfrecord.frame`), bad rows, and partial
    statistics over good rows (merged in order)."""

    rows: int = 0
    examples: Tuple[List[bytes], ...] = ((), (), (), ())  # type: ignore[assignment]
    bad: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    unlabelled: List[Dict[str, Any]] = dataclasses.field(default_factory=list)  # {file, line, row} per row
    missing: List[List[int]] = dataclasses.field(default_factory=list)  # [split][feature index]
    numeric: Dict[int, NumericStats] = dataclasses.field(default_factory=dict)  # training rows
    categories: Dict[int, collections.Counter] = dataclasses.field(default_factory=dict)  # training rows
    class_counts: List[collections.Counter] = dataclasses.field(default_factory=list)  # [split]
    label_moments: NumericStats = dataclasses.field(default_factory=NumericStats)  # training rows, regression
    labelled: int = 0  # good rows with a label (all of them unless the label is optional)
    # With plan.train_numbers: {feature index: '<f4' [training rows]}, each written row's value, NaN if missing.
    train_numbers: Dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    # Per split, the key hash of each example (uint64, aligned with `examples`): it picks the row's shard.
    hashes: Tuple[Any, ...] = ((), (), (), ())
    # Rows written per split, once the rows themselves were taken out (`without_rows`).
    written: Tuple[int, ...] = ()

    def split_counts(self) -> List[int]:
        """The good rows of each split."""
        return list(self.written) if self.written else [len(e) for e in self.examples]

    def without_rows(self) -> "ChunkResult":
        """This result without its encoded rows (written elsewhere): statistics, counts and bad rows only."""
        empty = tuple(() for _ in SPLITS)
        return dataclasses.replace(self, examples=empty, hashes=empty, written=tuple(self.split_counts()))


class Unlabelled(Exception):
    """A readable row whose label is missing (prepare only): set aside, not a bad row."""


class BadValue(Exception):
    def __init__(self, column: Optional[str], value: Any, expected: str):
        super().__init__(expected)
        self.column, self.value, self.expected = column, value, expected


_PLAN: WorkerPlan[EncodePlan] = WorkerPlan("encode_chunk")


def init_worker(plan: EncodePlan) -> None:
    _PLAN.set(plan)


def encode_chunk(task: ChunkTask) -> ChunkResult:
    """Checks and encodes one chunk (runs in a worker process; `init_worker` set the plan)."""
    plan = _PLAN.get()
    out = _encode_csv(task, plan) if task.chunk.fmt == CSV else _encode_rows(task, plan)
    out.examples = tuple(frame(e) for e in out.examples)
    out.hashes = tuple(np.asarray(h, dtype=np.uint64) for h in out.hashes)
    return out


def _encode_rows(task: ChunkTask, plan: EncodePlan) -> ChunkResult:
    """The precise path, row by row (JSON Lines)."""
    chunk = task.chunk
    out = _empty_result(plan)
    collected: List[Tuple[List[Optional[float]], ...]] = []
    checked = False
    for offset, (line, record) in enumerate(read_records(chunk)):
        out.rows += 1
        try:
            split, key, typed, serialized = _row(task, plan, offset, record)
        except (BadRecord, BadValue, Unlabelled) as e:
            _set_aside(out, e, chunk, line, record)
            continue
        if not checked:
            _check_against_records(typed, key, serialized, plan, chunk, line)
            checked = True
        out.examples[split].append(serialized)
        out.hashes[split].append(int(task.key_hashes[offset]))
        _tally(out, typed, split, plan, collected)
    _finish_numeric(out, collected, plan)
    return out


def _row(task: ChunkTask, plan: EncodePlan, offset: int, record: Any) -> Tuple[int, str, List[Any], bytes]:
    """(split, key, typed values, serialized Example) of one record; raises BadRecord or BadValue."""
    values = row_values(record, task.chunk, plan.missing)
    split, key = _split_and_key(values, task.first_row + offset, int(task.key_hashes[offset]), task, plan)
    typed = _typed(values, plan)  # raises BadValue for the row's first bad value
    return split, key, typed, _serialize(typed, key, plan)


# -- CSV: column at a time ---------------------------------------------------------------------------------
@dataclasses.dataclass
class _Columns:
    """A CSV chunk's values per feature, one item per row: numbers (float64, NaN where absent) or canonical
    texts, presence, the label (class index or number) and which rows the precise path must decide."""

    numbers: Dict[int, np.ndarray]
    f32: Dict[int, np.ndarray]
    texts: Dict[int, List[Optional[str]]]
    present: Dict[int, np.ndarray]
    label: np.ndarray
    labelled: np.ndarray
    doubtful: np.ndarray

    def set_row(self, i: int, typed: List[Any], plan: EncodePlan) -> None:
        """Takes the precise path's typed values for row i."""
        for f, value in zip(plan.features, typed):
            self.present[f.index][i] = value is not None
            if f.kind == NUMERIC:
                self.numbers[f.index][i] = np.nan if value is None else value
            else:
                self.texts[f.index][i] = value
        self.labelled[i] = typed[-1] is not None
        self.label[i] = 0 if typed[-1] is None else typed[-1]

    def typed(self, i: int, plan: EncodePlan) -> List[Any]:
        """Row i as `_typed` gives it."""
        out: List[Any] = []
        for f in plan.features:
            if not self.present[f.index][i]:
                out.append(None)
            else:
                out.append(float(self.numbers[f.index][i]) if f.kind == NUMERIC else self.texts[f.index][i])
        out.append(self.label[i].item() if self.labelled[i] else None)
        return out


def _encode_csv(task: ChunkTask, plan: EncodePlan) -> ChunkResult:
    """A CSV chunk a column at a time; rows any check doubts go down the precise path (`_row`), so every
    byte, statistic and message is the per-row path's."""
    chunk = task.chunk
    table = arrow_csv.table(chunk, plan.missing)
    records: Optional[List[List[str]]] = None
    if table is None:
        rows = csv_rows(chunk, _needed(plan), plan.missing)
        lines, records, values = rows.lines, rows.records, rows.values
        columns = _columns(values, len(records), plan)
        columns.doubtful |= ~rows.readable
    else:
        columns, values = _table_columns(table, plan)
        lines = list(range(chunk.first_line, chunk.first_line + table.num_rows))
    out = _empty_result(plan)
    out.rows = len(lines)
    if not lines:
        return out
    splits = split_indices(task.key_hashes, plan.eval_fraction, plan.test_fraction, plan.valid_fraction)
    keys = _keys(values.get(plan.key_column) if plan.key_column else None, task, columns.doubtful)
    serialized = _assemble(columns, keys, plan)
    good = ~columns.doubtful
    doubtful = np.flatnonzero(columns.doubtful).tolist()
    if doubtful and records is None:
        lines, records = csv_records(chunk)  # the records Arrow read, for the precise path
    for i in doubtful:
        try:
            _, keys[i], typed, serialized[i] = _row(task, plan, i, records[i])
        except (BadRecord, BadValue, Unlabelled) as e:
            _set_aside(out, e, chunk, lines[i], records[i])
            continue
        columns.set_row(i, typed, plan)
        good[i] = True
    _finish_csv(out, columns, splits, good, plan)
    rows = np.flatnonzero(good)
    if len(rows):
        first = int(rows[0])
        _check_against_records(columns.typed(first, plan), keys[first], serialized[first], plan, chunk, lines[first])
    for s in range(len(SPLITS)):
        mine = rows[splits[rows] == s]
        out.examples[s].extend(serialized[i] for i in mine.tolist())
        out.hashes = out.hashes[:s] + (task.key_hashes[mine],) + out.hashes[s + 1 :]
    return out


def _needed(plan: EncodePlan) -> List[str]:
    return [f.name for f in plan.features] + [plan.label] + ([plan.key_column] if plan.key_column else [])


def _table_columns(table: pa.Table, plan: EncodePlan) -> Tuple[_Columns, Dict[str, Sequence[Optional[str]]]]:
    """`_columns` of a chunk Arrow read, and the texts of its non-numeric needed columns: numbers cast in C
    (`arrow_csv.numbers`), a column Arrow refuses converted by `float()`."""
    names = set(table.column_names)
    numeric = {f.name for f in plan.features if f.kind == NUMERIC}
    values = {n: arrow_csv.texts(table.column(n)) for n in _needed(plan) if n in names and n not in numeric}
    converted = {}
    for name in numeric & names:
        got = arrow_csv.numbers(table.column(name))
        if got is None:
            values[name] = arrow_csv.texts(table.column(name))
        else:
            converted[name] = numbers.checked(*got)
    return _columns(values, table.num_rows, plan, converted), values


def _columns(
    values: Dict[str, Sequence[Optional[str]]],
    rows: int,
    plan: EncodePlan,
    converted: Optional[Dict[str, Tuple[np.ndarray, ...]]] = None,
) -> _Columns:
    """The columns of a chunk from its cleaned texts; `converted` holds numeric columns already converted
    (`numbers.checked`)."""
    absent: Sequence[Optional[str]] = [None] * rows
    doubtful = np.zeros(rows, bool)
    floats, f32, texts, present = {}, {}, {}, {}
    converted = converted or {}
    for f in plan.features:
        column = values.get(f.name, absent)
        if f.kind == NUMERIC:
            floats[f.index], f32[f.index], present[f.index], bad = (
                converted[f.name] if f.name in converted else numbers.column(column)
            )
        else:
            texts[f.index], present[f.index], bad = _text_column(f, column)
        doubtful |= bad
    label, labelled, bad = _label_column(values.get(plan.label, absent), plan)
    return _Columns(floats, f32, texts, present, label, labelled, doubtful | bad)


def _text_column(f: FeaturePlan, column: Sequence[Optional[str]]) -> Tuple[List[Optional[str]], np.ndarray, np.ndarray]:
    """(canonical texts, present, doubtful): an integer categorical's values as `_whole_number` writes them."""
    texts = list(column)
    doubtful = np.zeros(len(texts), bool)
    if f.value_type == "int":
        for i, text in enumerate(texts):
            try:
                texts[i] = None if text is None else _whole_number(f.name, text, "")
            except BadValue:
                texts[i], doubtful[i] = None, True
    return texts, np.not_equal(np.array(texts, dtype=object), None), doubtful


def _label_column(column: Sequence[Optional[str]], plan: EncodePlan) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(class indices or numbers, labelled, doubtful). A missing label is fine only when the label is optional
    (otherwise the precise path sets the row aside as unlabelled); an invalid label is always left to it."""
    missing = np.equal(np.array(column, dtype=object), None)
    if plan.task == CLASSIFICATION:
        label = _class_indices(column, plan)
        invalid = (label < 0) & ~missing
    else:
        label, _, present, invalid = numbers.column(column)
        label = np.where(present, label, 0.0)
    doubtful = invalid | (missing if not plan.optional_label else False)
    labelled = ~missing & ~invalid
    return np.where(labelled, label, 0).astype(label.dtype), labelled, doubtful


def _class_indices(column: Sequence[Optional[str]], plan: EncodePlan) -> np.ndarray:
    """int64 [rows]: `_class_of` each label text (a dict lookup in C unless classes are whole numbers)."""
    if plan.whole_number_classes:
        return np.array([_class_of(text, plan) for text in column], dtype=np.int64)
    return np.fromiter(map(plan.class_index.get, column, itertools.repeat(-1)), np.int64, len(column))


def _class_of(text: Optional[str], plan: EncodePlan) -> int:
    """The class index of a label text; -1 when it is missing or not a class."""
    if text is None:
        return -1
    if plan.whole_number_classes:
        try:
            text = _whole_number(plan.label, text, "")
        except BadValue:
            return -1
    return plan.class_index.get(text, -1)


def _keys(column: Optional[Sequence[Optional[str]]], task: ChunkTask, doubtful: np.ndarray) -> List[str]:
    """Every row's key: the key column's value, or the derived key; a missing or duplicate key makes its row
    doubtful (the precise path reports it)."""
    if column is None:
        keys = [f"{h:016x}-0" for h in task.key_hashes.tolist()]
        for row, occurrence in task.occurrences.items():
            i = row - task.first_row
            keys[i] = derived_key(int(task.key_hashes[i]), occurrence)
        return keys
    doubtful |= np.equal(np.array(column, dtype=object), None)
    for row in task.duplicates:
        doubtful[row - task.first_row] = True
    return ["" if k is None else k for k in column]


def _assemble(columns: _Columns, keys: List[str], plan: EncodePlan) -> List[bytes]:
    """Every row's serialized Example from the columns (rows the precise path redoes hold placeholders)."""
    pieces: List[List[bytes]] = [wire.key_entries(keys)]
    for group in _groups(plan):
        if group[0].kind == NUMERIC:
            pieces.append(
                wire.numeric_block(
                    [f.prefix for f in group],
                    [columns.f32[f.index] for f in group],
                    [columns.present[f.index] for f in group],
                )
            )
        else:
            pieces.append(wire.text_entries(group[0].key, columns.texts[group[0].index]))
    pieces.append(_label_entries(columns, plan))
    return wire.examples(pieces)


def _groups(plan: EncodePlan) -> List[List[FeaturePlan]]:
    """The features in key order, adjacent numeric features grouped (each categorical alone)."""
    groups: List[List[FeaturePlan]] = []
    for f in sorted(plan.features, key=lambda f: f.slot):
        if f.kind == NUMERIC and groups and groups[-1][0].kind == NUMERIC:
            groups[-1].append(f)
        else:
            groups.append([f])
    return groups


def _label_entries(columns: _Columns, plan: EncodePlan) -> List[bytes]:
    if plan.task == CLASSIFICATION:
        entries = [wire.class_entry(i) for i in range(len(plan.classes))] + [b""]
        index = np.where(columns.labelled, columns.label, len(plan.classes))
        return list(map(entries.__getitem__, index.tolist()))
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = columns.label.astype("<f4")
    return wire.numeric_block([_LABEL_PREFIX], [f32], [columns.labelled])


def _finish_csv(out: ChunkResult, columns: _Columns, splits: np.ndarray, good: np.ndarray, plan: EncodePlan) -> None:
    """`_tally` and `_finish_numeric` over the good rows, a column at a time."""
    train = good & (splits == 0)
    for f in plan.features:
        present = columns.present[f.index]
        absent = np.bincount(splits[good & ~present], minlength=len(SPLITS)).tolist()
        for s in range(len(SPLITS)):
            out.missing[s][f.index] = absent[s]
        if f.kind == NUMERIC:
            if plan.train_numbers:
                out.train_numbers[f.index] = _float32(columns.numbers[f.index][train])
        else:
            out.categories[f.index].update(itertools.compress(columns.texts[f.index], (train & present).tolist()))
    numeric = [f.index for f in plan.features if f.kind == NUMERIC]
    trained = [columns.numbers[i][train & columns.present[i]] for i in numeric]
    out.numeric.update(zip(numeric, map(NumericStats.of, trained)))
    labelled = good & columns.labelled
    out.labelled = int(np.count_nonzero(labelled))
    if plan.task == CLASSIFICATION:
        for s in range(len(SPLITS)):
            counts = np.bincount(columns.label[labelled & (splits == s)], minlength=len(plan.classes)).tolist()
            out.class_counts[s].update({c: n for c, n in enumerate(counts) if n})
    else:
        out.label_moments = NumericStats.of(columns.label[labelled & train])


def _empty_result(plan: EncodePlan) -> ChunkResult:
    n = len(plan.features)
    return ChunkResult(
        examples=tuple([] for _ in SPLITS),
        hashes=tuple([] for _ in SPLITS),
        missing=[[0] * n for _ in SPLITS],
        categories={f.index: collections.Counter() for f in plan.features if f.kind != NUMERIC},
        class_counts=[collections.Counter() for _ in SPLITS],
    )


def _split_and_key(
    values: Dict[str, Optional[str]], row: int, key_hash: int, task: ChunkTask, plan: EncodePlan
) -> Tuple[int, str]:
    if values.get(plan.label) is None and not plan.optional_label:
        raise Unlabelled()
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


_LABEL_PREFIX = wire.float_entry_prefix(LABEL_KEY)
_NUMERIC = "the column is numeric"
_INTEGER = "the column is an integer categorical"


def _typed(values: Dict[str, Optional[str]], plan: EncodePlan) -> List[Any]:
    """[feature values in schema order (float / canonical text / None)..., label (class index, float or None)].

    Raises BadValue naming the column and the expectation for the row's first bad value."""
    typed: List[Any] = []
    for f in plan.features:
        text = values.get(f.name)
        if text is None:
            typed.append(None)
        elif f.kind == NUMERIC:
            try:
                typed.append(numbers.number(text))
            except numbers.InvalidNumber as e:
                raise BadValue(f.name, text, e.explained(_NUMERIC)) from None
        elif f.value_type == "int":
            typed.append(_whole_number(f.name, text, _INTEGER))
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
        return numbers.number(text)
    except numbers.InvalidNumber as e:
        raise BadValue(column, text, e.explained(why)) from None


def _whole_number(column: str, text: str, why: str) -> str:
    whole = numbers.whole_text(_number(column, text, why))
    if whole is None:
        raise BadValue(column, text, f"{text!r} is not a whole number ({why})")
    return whole


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
    """The Example of `_typed`'s values, from `wire`'s per-value pieces (cached per key, text and class)."""
    entries: List[bytes] = [b""] * (len(plan.features) + 2)
    entries[0] = wire.key_entry(key)
    pack, text_entry = wire.pack_float32, wire.text_entry
    for f, value in zip(plan.features, typed):
        if value is not None:
            entries[f.slot] = f.prefix + pack(value) if f.kind == NUMERIC else text_entry(f.key, value)
    label = typed[-1]
    if label is not None:
        entries[-1] = wire.class_entry(label) if plan.task == CLASSIFICATION else _LABEL_PREFIX + pack(label)
    return wire.example(entries)


def _check_against_records(
    typed: List[Any], key: str, serialized: bytes, plan: EncodePlan, chunk: Chunk, line: int
) -> None:
    """Guards the plan-driven encoders (per row, and a column at a time): the chunk's first good row must be
    the bytes `records.serialize_example` writes for its typed values through the schema."""
    row = {f.name: v for f, v in zip(plan.features, typed)}
    label = typed[-1]
    row[plan.label] = plan.classes[label] if plan.task == CLASSIFICATION and label is not None else label
    if records.serialize_example(row, plan.check_schema, key, with_label=label is not None) != serialized:
        raise AssertionError(
            f"{where(chunk.file_name, line)}: pass 2's encoder disagrees with records.serialize_example"
        )


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
            out.numeric[f.index] = NumericStats.of(
                np.array([row[f.index] for row in collected if row[f.index] is not None])
            )
            if plan.train_numbers:
                column = [np.nan if row[f.index] is None else row[f.index] for row in collected]
                out.train_numbers[f.index] = _float32(np.array(column, dtype=np.float64))
    if plan.task != CLASSIFICATION:
        out.label_moments = NumericStats.of(np.array([row[-1] for row in collected if row[-1] is not None]))


def _float32(values: np.ndarray) -> np.ndarray:
    """The float32 values the Examples hold (written values are finite float32; NaN stays NaN)."""
    return values.astype("<f4")


def _set_aside(out: ChunkResult, error: Exception, chunk: Chunk, line: int, record: Any) -> None:
    """Adds a row the precise path refused to the chunk's unlabelled or bad rows."""
    if isinstance(error, Unlabelled):
        out.unlabelled.append({"file": chunk.file_name, "line": line, "row": raw_row(record, chunk.columns)})
    else:
        out.bad.append(_bad_row(error, chunk, line, record))


def _bad_row(error: Exception, chunk: Chunk, line: int, record: Any) -> Dict[str, Any]:
    column = getattr(error, "column", None)
    value = getattr(error, "value", None)
    if isinstance(error, BadRecord):
        reason = error.placed(chunk.file_name, line)
    else:
        reason = f"{where(chunk.file_name, line, column)}: {error.expected}"  # type: ignore[attr-defined]
    return {
        "file": chunk.file_name,
        "line": line,
        "column": column,
        "value": value,
        "reason": reason,
        "row": raw_row(record, chunk.columns),
    }
