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


class _SummedPerChunk:
    """A `quantiles.Counter` as a distributed engine counts: statistics and the first round from the chunks'
    `ChunkSummary`s, later rounds from each chunk's sparse `chunk_counts`, all summed in a shuffled order."""

    def __init__(self, chunks, rng):
        self._chunks, self._rng, self.rounds = chunks, rng, []

    def _shuffled(self):
        return [self._chunks[i] for i in self._rng.permutation(len(self._chunks))]

    def summaries(self):
        return quantiles.summaries([quantiles.chunk_summary(c) for c in self._shuffled()])

    def select(self, selection):
        while not selection.done:
            groups, shift = selection.groups(), selection.shift
            self.rounds.append(shift)
            if shift == quantiles.FIRST_SHIFT:
                counts = quantiles.first_round(
                    quantiles.first_counts(map(quantiles.chunk_summary, self._shuffled())), groups
                )
            else:
                counts = np.zeros(len(groups) * quantiles.BINS, np.int64)
                for chunk in self._shuffled():
                    slots, found = quantiles.chunk_counts(chunk, groups, shift)
                    counts[slots] += found
            selection = selection.descend(counts)
        return selection


@pytest.mark.parametrize("kind", ["wide", "special"])
def test_a_counter_summing_per_chunk_counts_in_another_order_gives_the_same_profile(kind):
    rng = np.random.default_rng(11)
    values = _values(kind, 3001, rng)
    parts = np.split(values, sorted(rng.integers(0, len(values), 6).tolist()))
    chunks = [quantiles.chunk_numbers({1: p, 4: p[::-1] * 3, 9: np.full(len(p), np.nan, np.float32)}) for p in parts]
    here = quantiles.profile_numbers(lambda: iter(chunks))
    counter = _SummedPerChunk(chunks, rng)
    there = quantiles.profile_numbers(counter)
    assert repr(there) == repr(here) and counter.rounds == [24, 16, 8, 0]
    assert there[9] == (0, NumericStats(), [])
    expected = np.percentile(values[~np.isnan(values)].astype(np.float64), np.arange(101))
    with np.errstate(invalid="ignore"):
        assert np.array_equal(np.array(there[1][2]), expected, equal_nan=True)


def test_a_chunk_summary_counts_each_features_keys_by_their_first_byte():
    chunk = quantiles.chunk_numbers({3: np.array([1.0, -1.0, np.nan, 2.0], np.float32), 7: np.zeros(0, np.float32)})
    summary = quantiles.chunk_summary(chunk)
    assert summary.features == (3, 7) and summary.counts == (3, 0) and summary.first.shape == (2, 256)
    top = quantiles.order_keys(np.array([1.0, -1.0, 2.0], np.float32)) >> 24
    assert summary.first[0].sum() == 3 and summary.first[0][top].tolist() == [1, 1, 1] and not summary.first[1].any()
    with pytest.raises(ValueError, match="the first round's groups are features without a prefix"):
        quantiles.first_round({3: summary.first[0]}, np.array([(3 << 32) | 5], np.uint64))
