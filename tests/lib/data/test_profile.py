"""Pass 1 on tiny chunks: exact column counts (present, numeric, whole), labels, key hashes and lines, read
by Arrow, by the csv module and row by row alike."""

from __future__ import annotations

import numpy as np
import pytest

from estimator_lib.data import profile
from estimator_lib.data.common import hash64
from estimator_lib.data.profile import ColumnCounts, Profile, ProfilePlan
from estimator_lib.data.read import Chunk

MISSING = frozenset({"", "NA"})
HEADER = ("id", "x", "word", "y")
LINES = ["a,1.5,Dream,yes", "b,2,Biscoe,no", "c,NA,7,yes", "d,nan,Dream,no", "e,1e39,3.0,maybe", ",abc,NA,yes"]
COUNTS = {
    "id": ColumnCounts(present=5, numeric=0, integer=0),
    "x": ColumnCounts(present=5, numeric=4, integer=2),  # nan reads as a number (not whole), 1e39 as a whole one
    "word": ColumnCounts(present=5, numeric=2, integer=2),
    "y": ColumnCounts(present=6, numeric=0, integer=0),
}


def _plan(**changes) -> ProfilePlan:
    fields = dict(
        label="y",
        key_column="id",
        missing=MISSING,
        eval_fraction=0.0,
        test_fraction=0.0,
        valid_fraction=0.0,
        max_label_values=10,
    )
    return ProfilePlan(**{**fields, **changes})


def _csv(lines, spaced=False) -> Chunk:
    text = "".join((" " + line if spaced else line) + "\n" for line in lines)
    return Chunk(0, "d.csv", "csv", 2, text, HEADER)


def _jsonl(lines) -> Chunk:
    rows = []
    for line in lines:
        values = dict(zip(HEADER, line.split(",")))
        rows.append("{" + ", ".join(f'"{k}": "{v}"' for k, v in values.items()) + "}")
    return Chunk(0, "d.jsonl", "jsonl", 2, "\n".join(rows) + "\n", None)


@pytest.mark.parametrize("reader", ["arrow", "csv module", "row by row"])
def test_a_chunk_is_profiled_exactly(reader):
    profile.init_worker(_plan())
    chunk = {"arrow": _csv(LINES), "csv module": _csv(LINES, spaced=True), "row by row": _jsonl(LINES)}[reader]
    found = profile.profile_chunk(chunk)
    assert found.rows == 6
    assert found.columns == COUNTS
    assert found.label_all == {"yes": 2, "no": 2, "maybe": 1} == found.label_train  # not the row without a key
    assert found.lines[0].tolist() == [2, 3, 4, 5, 6, 7]
    assert found.valid[0].tolist() == [True] * 5 + [False]  # the last row has no key
    assert found.key_hashes[0].tolist() == [hash64(k) for k in "abcde"] + [0]
    assert found.first_seen["x"] == (chunk.file_name, 2)


def test_too_many_label_values_overflow():
    profile.init_worker(_plan(max_label_values=2))
    found = profile.profile_chunk(_csv(LINES))
    assert found.label_overflow and len(found.label_all) == 2


def test_without_a_key_column_rows_hash_their_content():
    profile.init_worker(_plan(key_column=None))
    found = profile.profile_chunk(_csv(LINES[:2]))
    expected = hash64("id\x1ea\x1fword\x1eDream\x1fx\x1e1.5\x1fy\x1eyes")
    assert found.key_hashes[0][0] == expected and found.valid[0].all()


def test_profiles_merge_in_order():
    profile.init_worker(_plan())
    first, second = profile.profile_chunk(_csv(LINES[:3])), profile.profile_chunk(_csv(LINES[3:]))
    merged = Profile()
    merged.merge(first, 10)
    merged.merge(second, 10)
    assert merged.rows == 6 and merged.columns == COUNTS
    assert profile.concat(merged.lines, np.uint32).tolist() == [2, 3, 4, 2, 3, 4]
    assert profile.concat([], np.uint32).dtype == np.uint32
