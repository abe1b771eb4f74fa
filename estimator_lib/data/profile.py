"""Pass 1 of preparation: profile every row without deciding anything yet.

A worker profiles one chunk: per column how many values are present, numeric and whole numbers (what type
inference needs), the label values seen (all rows, and training rows for the classes), and per row its key
hash and line. The key hash fixes the row's split, so the training rows are known in this pass already.
Rows that cannot be read at all are only marked here; pass 2 reports them with their reasons.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import itertools
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from estimator_lib.data import arrow_csv, numbers
from estimator_lib.data.common import content_text, hash64, split_index, split_indices
from estimator_lib.data.parallel import WorkerPlan
from estimator_lib.data.read import CSV, BadRecord, Chunk, csv_rows, records, row_values, with_help


@dataclasses.dataclass(frozen=True)
class ProfilePlan:
    """What pass 1 needs to know (sent once to each worker)."""

    label: str
    key_column: Optional[str]
    missing: FrozenSet[str]
    eval_fraction: float
    test_fraction: float
    valid_fraction: float
    max_label_values: int


@dataclasses.dataclass
class ColumnCounts:
    present: int = 0
    numeric: int = 0
    integer: int = 0

    def add(self, other: "ColumnCounts") -> None:
        self.present += other.present
        self.numeric += other.numeric
        self.integer += other.integer


@dataclasses.dataclass
class Profile:
    """Pass-1 findings for a chunk, and (merged in input order) for the whole input."""

    rows: int = 0
    train_rows: int = 0  # rows with a usable key whose hash puts them in the training split
    # Per row, in per-chunk arrays: a chunk's own, and the in-process engine's merge; the Beam engine's launcher
    # merges the chunks without them (they stay in the chunks' stored profiles, `data.keys`).
    key_hashes: List[np.ndarray] = dataclasses.field(default_factory=list)  # uint64 per row
    valid: List[np.ndarray] = dataclasses.field(default_factory=list)  # bool per row: readable, key present
    lines: List[np.ndarray] = dataclasses.field(default_factory=list)  # uint32 per row
    columns: Dict[str, ColumnCounts] = dataclasses.field(default_factory=dict)  # in order of appearance
    first_seen: Dict[str, Tuple[str, int]] = dataclasses.field(default_factory=dict)  # column -> (file, line)
    label_all: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    label_train: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    label_overflow: bool = False
    # The first JSON Lines record that could not be read as a row, placed and explained: its columns are
    # unknown, so an input of nothing else has no columns, and that record's reason is what to tell.
    unreadable: Optional[str] = None

    def without_rows(self) -> "Profile":
        """This profile without its per-row arrays (counts, columns and labels only)."""
        return dataclasses.replace(self, key_hashes=[], valid=[], lines=[])

    def merge(self, other: "Profile", max_label_values: int) -> None:
        self.rows += other.rows
        self.train_rows += other.train_rows
        self.key_hashes += other.key_hashes
        self.valid += other.valid
        self.lines += other.lines
        for name, counts in other.columns.items():
            self.columns.setdefault(name, ColumnCounts()).add(counts)
            self.first_seen.setdefault(name, other.first_seen[name])
        self.label_all.update(other.label_all)
        self.label_train.update(other.label_train)
        self.label_overflow |= other.label_overflow or len(self.label_all) > max_label_values
        self.unreadable = self.unreadable or other.unreadable


def concat(parts: List[np.ndarray], dtype: Any) -> np.ndarray:
    """The per-chunk arrays of a merged `Profile` (key_hashes, valid, lines) as one array over all rows."""
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


_PLAN: WorkerPlan[ProfilePlan] = WorkerPlan("profile_chunk")


def init_worker(plan: ProfilePlan) -> None:
    _PLAN.set(plan)


def profile_chunk(chunk: Chunk) -> Profile:
    """Profiles one chunk (runs in a worker process; `init_worker` set the plan)."""
    plan = _PLAN.get()
    profile = _profile_csv(chunk, plan) if chunk.fmt == CSV else _profile_rows(chunk, plan)
    hashes = concat(profile.key_hashes, np.uint64)[concat(profile.valid, bool)]
    splits = split_indices(hashes, plan.eval_fraction, plan.test_fraction, plan.valid_fraction)
    profile.train_rows = int(np.count_nonzero(splits == 0))
    return profile


def _profile_rows(chunk: Chunk, plan: ProfilePlan) -> Profile:
    """Row by row (JSON Lines)."""
    profile = Profile()
    hashes, valid, lines = [], [], []
    good: List[Dict[str, Optional[str]]] = []
    for line, record in records(chunk):
        lines.append(line)
        items = _items(record, chunk, plan, line, profile)
        row = dict(items) if items is not None else None
        key_hash = _key_hash(items, row, plan) if items is not None else None
        hashes.append(key_hash or 0)
        valid.append(key_hash is not None)
        if row is not None:
            _note_columns(profile, row, chunk, line)
            good.append(row)
            if key_hash is not None:
                _count_label(
                    profile,
                    row,
                    split_index(key_hash, plan.eval_fraction, plan.test_fraction, plan.valid_fraction),
                    plan,
                )
    _count_columns(profile, good)
    profile.rows = len(lines)
    profile.key_hashes = [np.array(hashes, dtype=np.uint64)]
    profile.valid = [np.array(valid, dtype=bool)]
    profile.lines = [np.array(lines, dtype=np.uint32)]
    return profile


# -- CSV: column at a time ---------------------------------------------------------------------------------
def _profile_csv(chunk: Chunk, plan: ProfilePlan) -> Profile:
    """`_profile_rows` of a CSV chunk, a column at a time, with the same findings: read by Arrow when it can
    (`arrow_csv`), by the csv module otherwise."""
    table = arrow_csv.table(chunk, plan.missing)
    if table is not None:
        return _profile_table(chunk, table, plan)
    header = chunk.columns or ()
    parsed = csv_rows(chunk, header, plan.missing)
    lines, rows, values, readable = parsed.lines, parsed.records, parsed.values, parsed.readable
    hashes, valid = _csv_key_hashes(values, header, readable, plan)
    profile = Profile(rows=len(rows))
    if readable.any():
        first_line = lines[int(np.argmax(readable))]
        for name in header:
            profile.columns[name] = _column_counts(values[name])
            profile.first_seen[name] = (chunk.file_name, first_line)
    splits = split_indices(hashes, plan.eval_fraction, plan.test_fraction, plan.valid_fraction)
    _count_labels(profile, values.get(plan.label), valid, splits, plan)
    profile.key_hashes = [hashes]
    profile.valid = [valid]
    profile.lines = [np.array(lines, dtype=np.uint32)]
    return profile


def _profile_table(chunk: Chunk, table: pa.Table, plan: ProfilePlan) -> Profile:
    """`_profile_csv` of a chunk Arrow read: every record fits the header and sits on its own line."""
    header = chunk.columns or ()
    profile = Profile(rows=table.num_rows)
    for name in header:
        profile.columns[name] = _arrow_column_counts(table.column(name))
        profile.first_seen[name] = (chunk.file_name, chunk.first_line)
    hashes, valid = _table_key_hashes(table, header, plan)
    splits = split_indices(hashes, plan.eval_fraction, plan.test_fraction, plan.valid_fraction)
    labels = arrow_csv.texts(table.column(plan.label)) if plan.label in header else None
    _count_labels(profile, labels, valid, splits, plan)
    profile.key_hashes = [hashes]
    profile.valid = [valid]
    profile.lines = [np.arange(chunk.first_line, chunk.first_line + table.num_rows, dtype=np.uint32)]
    return profile


def _arrow_column_counts(column: pa.ChunkedArray) -> ColumnCounts:
    """`_column_counts` of an Arrow column: cast in C when every value is a finite number, otherwise
    `float()` on each distinct value, counted by how often it occurs. (A column whose first value is not a
    number skips the cast, which would fail at some cost.)"""
    start = arrow_csv.first(column)
    converted = arrow_csv.numbers(column) if start is not None and numbers.read(start) is not None else None
    if converted is not None:
        values = converted[0][converted[1]]
        return ColumnCounts(len(values), len(values), int(np.count_nonzero(numbers.whole(values))))
    texts, indices = arrow_csv.distinct(column)
    occurs = np.bincount(indices[indices >= 0], minlength=len(texts))
    numeric, whole = _number_kinds(texts)
    return ColumnCounts(int(occurs.sum()), int(occurs[numeric].sum()), int(occurs[whole].sum()))


def _number_kinds(texts: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
    """(reads as a number, whole number) per text (`numbers.read`, `numbers.whole`)."""
    read = np.array([numbers.read(t) for t in texts], dtype=object)
    numeric = np.not_equal(read, None)
    whole = np.zeros(len(texts), bool)
    whole[numeric] = numbers.whole(read[numeric].astype(np.float64))
    return numeric, whole


def _table_key_hashes(table: pa.Table, header: Sequence[str], plan: ProfilePlan) -> Tuple[np.ndarray, np.ndarray]:
    """`_csv_key_hashes` of a chunk Arrow read (every record is readable)."""
    if plan.key_column is None:
        texts = arrow_csv.content_texts(table, sorted(header))
        valid = np.ones(table.num_rows, bool)
    else:
        keys = table.column(plan.key_column)
        valid = arrow_csv.present(keys)
        texts = [b"" if k is None else k for k in keys.cast(pa.binary()).to_pylist()]
    hashes = _hashes64(texts)
    hashes[~valid] = 0
    return hashes, valid


def _column_counts(values: Sequence[Optional[str]]) -> ColumnCounts:
    """A column's present, numeric and whole-number counts (None marks missing and unreadable rows)."""
    try:
        read = np.fromiter(map(float, values), np.float64, len(values))  # one C loop for a clean column
        present = len(read)
    except (TypeError, ValueError):
        texts = [v for v in values if v is not None]
        present = len(texts)
        read = np.array(numbers.read_all(texts), dtype=np.float64)
    return ColumnCounts(present, len(read), int(np.count_nonzero(numbers.whole(read))))


def _csv_key_hashes(
    values: Dict[str, Sequence[Optional[str]]], header: Sequence[str], readable: np.ndarray, plan: ProfilePlan
) -> Tuple[np.ndarray, np.ndarray]:
    """(uint64 key hashes, valid): `_key_hash` of every row (0 and invalid where it has none)."""
    if plan.key_column is None:
        texts = _content_texts(values, header)
        valid = readable
    else:
        keys = values[plan.key_column]
        valid = readable & np.not_equal(np.array(keys, dtype=object), None)
        texts = ["" if k is None else k for k in keys]
    hashes = _hashes64(map(str.encode, texts))
    hashes[~valid] = 0
    return hashes, valid


_BLAKE2B_8 = functools.partial(hashlib.blake2b, digest_size=8)


def _hashes64(texts: Iterable[bytes]) -> np.ndarray:
    """uint64 [texts]: `common.hash64` of each UTF-8 text, mapped in C (no Python frame per row; hashing the
    bytes themselves is most of what is left)."""
    digests = b"".join(map(hashlib.blake2b.digest, map(_BLAKE2B_8, texts)))
    return np.frombuffer(digests, dtype=">u8").astype(np.uint64)


def _content_texts(values: Dict[str, Sequence[Optional[str]]], header: Sequence[str]) -> List[str]:
    """`content_text` of every row: one format string for rows with every value present, the general
    function for the others."""
    names = sorted(header)
    columns = [values[n] for n in names]
    form = "\x1f".join(n.replace("%", "%%") + "\x1e%s" for n in names)
    texts = list(map(form.__mod__, zip(*columns)))
    gaps = np.zeros(len(texts), bool)
    for column in columns:
        if None in column:
            gaps |= np.equal(np.array(column, dtype=object), None)
    for i in np.flatnonzero(gaps).tolist():
        texts[i] = content_text((n, c[i]) for n, c in zip(names, columns))
    return texts


def _count_labels(
    profile: Profile,
    labels: Optional[Sequence[Optional[str]]],
    valid: np.ndarray,
    splits: np.ndarray,
    plan: ProfilePlan,
) -> None:
    """`_count_label` over the rows with a key, in order."""
    if labels is None:
        return
    counted = (valid & np.not_equal(np.array(labels, dtype=object), None)).tolist()
    if len(set(itertools.compress(labels, counted))) > plan.max_label_values:
        for i in itertools.compress(range(len(labels)), counted):
            _count_label(profile, {plan.label: labels[i]}, int(splits[i]), plan)
        return
    profile.label_all.update(itertools.compress(labels, counted))
    train = (np.array(counted, dtype=bool) & (splits == 0)).tolist()
    profile.label_train.update(itertools.compress(labels, train))


def _note_columns(profile: Profile, row: Dict[str, Optional[str]], chunk: Chunk, line: int) -> None:
    if len(row) == len(profile.columns) and chunk.fmt == CSV:
        return  # a CSV chunk's rows all have the header's columns
    for name in row:
        if name not in profile.columns:
            profile.columns[name] = ColumnCounts()
            profile.first_seen[name] = (chunk.file_name, line)


def _count_columns(profile: Profile, rows: List[Dict[str, Optional[str]]]) -> None:
    """Column by column, as `_column_counts` counts a CSV chunk's columns."""
    for name, counts in profile.columns.items():
        present = [v for v in (row.get(name) for row in rows) if v is not None]
        counts.add(_column_counts(present))


def _items(
    record, chunk: Chunk, plan: ProfilePlan, line: int, profile: Profile
) -> Optional[Sequence[Tuple[str, Optional[str]]]]:
    """The record's (column, value) pairs; None for a record that cannot be read (the first is noted in
    `profile.unreadable`; pass 2 reports each)."""
    try:
        return list(row_values(record, chunk, plan.missing).items())
    except BadRecord as e:
        if profile.unreadable is None:
            profile.unreadable = with_help(e.placed(chunk.file_name, line), e.value)
        return None


def _key_hash(items: Sequence[Tuple[str, Optional[str]]], row: dict, plan: ProfilePlan) -> Optional[int]:
    if plan.key_column is None:
        return hash64(content_text(items))
    key = row.get(plan.key_column)
    return None if key is None else hash64(key)


def _count_label(profile: Profile, row: dict, split: int, plan: ProfilePlan) -> None:
    value = row.get(plan.label)
    if value is None:
        return
    if value not in profile.label_all and len(profile.label_all) >= plan.max_label_values:
        profile.label_overflow = True
        return
    profile.label_all[value] += 1
    if split == 0:
        profile.label_train[value] += 1
