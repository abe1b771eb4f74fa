"""data/keys.py: repeated keys and places found per bucket of key hashes give what one pass over all rows gives,
whatever the number of buckets."""

from __future__ import annotations

import numpy as np
import pytest

from estimator_lib.data import keys, places
from estimator_lib.data.plan import find_duplicates, row_place

NAMES = ("a.csv", "b.csv")


def _rows(n: int, seed: int = 0):
    """Per-row pass-1 arrays of two chunks (one per file), many repeated hashes, some rows without a key."""
    rng = np.random.default_rng(seed)
    hashes = rng.choice(rng.integers(0, 2**64, 40, dtype=np.uint64), n)
    valid = rng.random(n) > 0.1
    lines = np.arange(2, n + 2, dtype=np.uint32)
    return hashes, valid, lines


def _resolved(hashes, valid, lines, plan: keys.KeyPlan, cut: int) -> keys.Resolved:
    """Every bucket of the two chunks [0, cut) (file 0) and [cut, n) (file 1) resolved, then put together."""
    parts = [
        keys.chunk_entries(hashes[:cut], valid[:cut], lines[:cut], 0, 0, 0),
        keys.chunk_entries(hashes[cut:], valid[cut:], lines[cut:], 1, 1, cut),
    ]
    by_bucket: dict = {}
    for part in parts:
        for bucket, entries in keys.buckets(part, plan.bits):
            by_bucket.setdefault(bucket, []).append(entries)
    found = [keys.resolve_all(by_bucket[b], plan) for b in sorted(by_bucket)]
    facts: dict = {}
    for one in found:
        for chunk, rows in one.facts.items():
            facts.setdefault(chunk, {}).update(rows)
    tables = {s: np.concatenate([one.places[s] for one in found]) for s in plan.splits}
    return keys.Resolved(facts, tables)


@pytest.mark.parametrize("bits", [0, 1, 3, 8])
@pytest.mark.parametrize("key_column", [True, False])
def test_buckets_find_the_repeats_and_places_of_one_pass_over_all_rows(bits, key_column):
    hashes, valid, lines = _rows(500)
    plan = keys.KeyPlan(NAMES, key_column, (0.2, 0.1, 0.1), ("train", "eval", "test", "valid"), bits)
    found = _resolved(hashes, valid, lines, plan, cut=300)
    repeats = find_duplicates(hashes, valid)
    expected = {
        r: row_place(first, lines, NAMES, [0, 300]) if key_column else occurrence
        for r, (first, occurrence) in repeats.items()
    }
    assert len(repeats) > 300
    assert {r: f for rows in found.facts.values() for r, f in rows.items()} == expected
    assert set(found.facts[1]) == {r for r in expected if r >= 300}
    for split in plan.splits:
        table = places.split_places(hashes, valid, lines, [0, 300], (0.2, 0.1, 0.1), split)
        assert found.places[split].tobytes() == table.tobytes(), split


def test_scoring_places_hold_every_usable_row():
    hashes, valid, lines = _rows(50, seed=1)
    plan = keys.scoring_plan(NAMES, False, 50)
    found = _resolved(hashes, valid, lines, plan, cut=20)
    assert found.places["eval"].tobytes() == places.input_places(hashes, valid, lines, [0, 20]).tobytes()


def test_the_places_file_written_part_by_part_is_np_saves(tmp_path):
    hashes, valid, lines = _rows(1000, seed=2)
    table = places.input_places(hashes, valid, lines, [0, 600])
    places.write_places(str(tmp_path / "whole.npy"), table)
    keys.write_places(str(tmp_path / "parts.npy"), iter([table[:7], table[7:7], table[7:]]), len(table))
    assert (tmp_path / "parts.npy").read_bytes() == (tmp_path / "whole.npy").read_bytes()
    with pytest.raises(AssertionError, match="7 places written, not the 8 counted"):
        keys.write_places(str(tmp_path / "short.npy"), iter([table[:7]]), 8)


def test_bucket_bits_aim_at_bucket_rows_each():
    assert [keys.bucket_bits(n) for n in (0, keys.BUCKET_ROWS, keys.BUCKET_ROWS + 1, 5_000_000)] == [0, 0, 1, 5]
    assert keys.bucket_bits(10**15) == 16
