"""Row hashing, splits and moments: the array forms give exactly what the per-value forms give."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from estimator_lib.data.common import Moments, exact_sum, exact_sums, split_index, split_indices


def _awkward_values() -> np.ndarray:
    rng = np.random.default_rng(0)
    spread = rng.normal(size=20_000) * rng.integers(1, 2**20, size=20_000)
    # (2**27 - k)**2 needs 54 bits: exactly halfway between two floats, where libm's pow and d * d can differ.
    halfway = np.arange(2**27 - 2_001, 2**27, 2, dtype=np.float64)
    return np.concatenate([spread.round(3), halfway, [0.0, -0.0, 3.4e38, -3.4e38, 1e-30, 2.0**-60]])


def test_moments_of_an_array_equal_moments_of_its_values_bit_for_bit():
    values = _awkward_values()
    pairs = [np.array([v, -v]) for v in values[20_000:20_100]]  # mean exactly 0: each deviation is halfway
    for part in (values, *pairs, values[:5], values[-6:], np.array([-0.0, 0.0, 1.0]), np.array([0.0, -0.0, -1.0])):
        assert Moments.of_array(part) == Moments.of(part.tolist())
    first_zero = Moments.of_array(np.array([0.0, -0.0]))
    assert (np.copysign(1, first_zero.min), np.copysign(1, first_zero.max)) == (1.0, 1.0)  # min() keeps the first
    assert Moments.of_array(np.zeros(0)) == Moments()


def _sums_to_check():
    rng = np.random.default_rng(2)
    yield rng.normal(size=5_000).round(5)
    yield rng.normal(size=3_000) * 10.0 ** rng.integers(-150, 150, size=3_000)  # every exponent at once
    cancelling = rng.normal(size=2_000) * 10.0 ** rng.integers(-30, 30, size=2_000)
    yield np.concatenate([cancelling, -cancelling[::-1], [1e-300]])  # the exact sum is tiny
    for n in (1, 2, 3):
        yield np.array([1.0, 2.0**-53, 2.0**-106][:n] * 777)  # ties: round half to even
    yield rng.integers(-(2**53), 2**53, size=2_000).astype(np.float64) * 2.0 ** rng.integers(-1074, 900, size=2_000)
    yield np.array([5e-324, -5e-324, 2.2250738585072014e-308, 3.4e38, -3.4e38, 0.0, -0.0, 1e308, -1e308] * 50)
    yield from (np.array(v) for v in ([-0.0], [-0.0, -0.0], [0.0, -0.0], [0.1] * 10, [2.0**-1074] * 5, []))


@pytest.mark.parametrize("values", list(_sums_to_check()), ids=lambda v: f"{len(v)} values")
def test_exact_sum_is_fsum_bit_for_bit(values):
    assert struct.pack("<d", exact_sum(values)) == struct.pack("<d", math.fsum(values.tolist()))


def test_exact_sums_of_parts_and_moments_of_arrays_equal_their_one_by_one_forms():
    parts = [p for p in _sums_to_check() if np.isfinite(np.sum(np.abs(p) / 1e10))]  # no overflow in any part
    lengths = [len(p) for p in parts]
    sums = exact_sums(np.concatenate(parts), lengths)
    assert [struct.pack("<d", s) for s in sums] == [struct.pack("<d", math.fsum(p.tolist())) for p in parts]
    arrays = [_awkward_values()[:3000], np.zeros(0), np.array([-0.0, 0.0]), _awkward_values()[-7:]]
    assert Moments.of_arrays(arrays) == [Moments.of(a.tolist()) for a in arrays]


def test_exact_sum_overflows_as_fsum_does():
    with pytest.raises(OverflowError, match="intermediate overflow in fsum"):
        exact_sum(np.array([1e308, 1e308]))


def test_split_indices_equal_split_index_row_by_row():
    rng = np.random.default_rng(1)
    hashes = np.concatenate(
        [
            rng.integers(0, 2**63, size=50_000, dtype=np.uint64) * np.uint64(2),
            np.array([0, 2**64 - 1, 2**63], np.uint64),
        ]
    )
    splits = split_indices(hashes, 0.2, 0.1, 0.05)
    assert splits.tolist() == [split_index(h, 0.2, 0.1, 0.05) for h in hashes.tolist()]
    assert sorted(set(splits.tolist())) == [0, 1, 2, 3]
