"""data/quantiles.py: percentiles of values cut into chunks, selected a few bits at a time, are np.percentile's
bit for bit, whatever the cut and the chunks' order."""

from __future__ import annotations

import numpy as np
import pytest

from estimator_lib.data import quantiles
from estimator_lib.data.combine import NumericStats


def _values(kind: str, n: int, rng) -> np.ndarray:
    if kind == "normal":
        return rng.normal(size=n).astype(np.float32)
    if kind == "few":
        return rng.integers(-3, 3, n).astype(np.float32)
    if kind == "wide":
        return (rng.lognormal(0, 8, n) * rng.choice([-1, 1], n)).astype(np.float32)
    values = rng.normal(size=n).astype(np.float32)  # missing, infinite and huge values among them
    for share, value in ((0.3, np.nan), (0.05, np.inf), (0.05, -np.inf), (0.05, 1e30), (0.05, -0.0)):
        values[rng.random(n) < share] = value
    return values


@pytest.mark.parametrize("kind", ["normal", "few", "wide", "special"])
def test_chunked_percentiles_are_np_percentiles(kind):
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 101, 997):
        values = _values(kind, n, rng)
        parts = np.split(values, sorted(rng.integers(0, n, 4).tolist()))
        order = rng.permutation(len(parts))
        chunks = [quantiles.chunk_numbers({2: parts[i], 5: parts[i][::-1] * 2}) for i in order]
        found = quantiles.profile_numbers(lambda chunks=chunks: iter(chunks))
        present = values[~np.isnan(values)].astype(np.float64)
        if not len(present):
            assert found[2][0] == 0
            continue
        expected = np.percentile(present, np.arange(101))
        with np.errstate(invalid="ignore"):
            assert np.array_equal(np.array(found[2][2]), expected, equal_nan=True), (kind, n)
        assert found[2][0] == len(present) and found[2][1] == NumericStats.of(present)
        doubled = np.percentile(present * np.float32(2), np.arange(101)) if kind != "special" else None
        if doubled is not None:  # a second feature, selected in the same rounds
            assert np.array_equal(np.array(found[5][2]), doubled), (kind, n)


def test_order_keys_sort_as_the_values_and_map_back():
    values = np.array([-np.inf, -1e30, -1.5, -0.0, 0.0, 1e-45, 2.0, np.inf], np.float32)
    keys = quantiles.order_keys(values)
    assert (np.diff(keys.astype(np.int64)) >= 0).all() and keys[3] == keys[4]
    assert quantiles.key_values(keys).tobytes() == (values + np.float32(0.0)).tobytes()  # -0.0 comes back 0.0


def test_ranks_are_the_ones_numpy_reads():
    previous, following, gamma = quantiles.ranks(5)
    assert previous[[0, 25, 50, 99, 100]].tolist() == [0, 1, 2, 3, 4]
    assert following[[0, 25, 99, 100]].tolist() == [1, 2, 4, 4] and gamma[[0, 99]].tolist() == [0.0, 0.96]
