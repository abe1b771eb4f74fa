"""Pass 1 of preparation: profile every row without deciding anything yet.

A worker profiles one chunk: per column how many values are present, numeric and whole numbers (what type
inference needs), the label values seen (all rows, and training rows for the classes), and per row its key
hash and line. The key hash fixes the row's split, so the training rows are known in this pass already.
Rows that cannot be read at all are only marked here; pass 2 reports them with their reasons.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np

from estimator_lib.data.common import content_text, hash64, split_index
from estimator_lib.data.read import CSV, BadRecord, Chunk, csv_values, json_values, records


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
    key_hashes: List[np.ndarray] = dataclasses.field(default_factory=list)  # uint64 per row
    valid: List[np.ndarray] = dataclasses.field(default_factory=list)  # bool per row: readable, key present
    lines: List[np.ndarray] = dataclasses.field(default_factory=list)  # uint32 per row
    columns: Dict[str, ColumnCounts] = dataclasses.field(default_factory=dict)  # in order of appearance
    first_seen: Dict[str, Tuple[str, int]] = dataclasses.field(default_factory=dict)  # column -> (file, line)
    label_all: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    label_train: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    label_overflow: bool = False

    def merge(self, other: "Profile", max_label_values: int) -> None:
        self.rows += other.rows
        self.key_hashes += other.key_hashes
        self.valid += other.valid
        self.lines += other.lines
        for name, counts in other.columns.items():
            self.columns.setdefault(name, ColumnCounts()).add(counts)
            self.first_seen.setdefault(name, other.first_seen[name])
        self.label_all.update(other.label_all)
        self.label_train.update(other.label_train)
        self.label_overflow |= other.label_overflow or len(self.label_all) > max_label_values


def concat(parts: List[np.ndarray], dtype: Any) -> np.ndarray:
    """The per-chunk arrays of a merged `Profile` (key_hashes, valid, lines) as one array over all rows."""
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


_PLAN: Optional[ProfilePlan] = None


def init_worker(plan: ProfilePlan) -> None:
    global _PLAN
    _PLAN = plan


def profile_chunk(chunk: Chunk) -> Profile:
    """Profiles one chunk (runs in a worker process; `init_worker` set the plan)."""
    plan = _PLAN
    assert plan is not None, "init_worker was not called"
    profile = Profile()
    hashes, valid, lines = [], [], []
    good: List[Dict[str, Optional[str]]] = []
    for line, record in records(chunk):
        lines.append(line)
        items = _items(record, chunk, plan)
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


def _note_columns(profile: Profile, row: Dict[str, Optional[str]], chunk: Chunk, line: int) -> None:
    if len(row) == len(profile.columns) and chunk.fmt == CSV:
        return  # a CSV chunk's rows all have the header's columns
    for name in row:
        if name not in profile.columns:
            profile.columns[name] = ColumnCounts()
            profile.first_seen[name] = (chunk.file_name, line)


def _count_columns(profile: Profile, rows: List[Dict[str, Optional[str]]]) -> None:
    """Column by column: `map(float, ...)` converts a clean numeric column in one C loop."""
    for name, counts in profile.columns.items():
        present = [v for v in (row.get(name) for row in rows) if v is not None]
        counts.present += len(present)
        try:
            numbers = list(map(float, present))
        except ValueError:
            numbers = _numbers(present)
        counts.numeric += len(numbers)
        counts.integer += sum(1 for x in numbers if x.is_integer())


def _numbers(texts: List[str]) -> List[float]:
    out = []
    for text in texts:
        try:
            out.append(float(text))
        except ValueError:
            pass
    return out


def _items(record, chunk: Chunk, plan: ProfilePlan) -> Optional[Sequence[Tuple[str, Optional[str]]]]:
    try:
        if chunk.fmt == CSV:
            return list(zip(chunk.columns, csv_values(record, chunk.columns, plan.missing)))
        return list(json_values(record, plan.missing).items())
    except BadRecord:
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
