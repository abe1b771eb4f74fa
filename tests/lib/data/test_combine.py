"""data/combine.py: exact statistics whose partial results combine in any order and grouping to the same bits,
checked against exact rational arithmetic; and the same merge as a Beam CombineFn on the DirectRunner."""

from __future__ import annotations

import dataclasses
import math
import random
from fractions import Fraction

import numpy as np
import pytest

from estimator_lib.data.combine import NumericStats, Vocabulary, merge_all


def hard_values(rows: int = 3000, seed: int = 7) -> np.ndarray:
    """Values whose float sums depend on the order: magnitudes from 1e-300 to 1e300, both signs, both zeros,
    subnormals, repeated values, and cancelling pairs."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(rows) * 10.0 ** rng.integers(-300, 300, rows)
    values[:40] = [0.0, -0.0, 5e-324, -5e-324, 1e308, -1e308, 1.5, 1.5, 0.1, 0.2] * 4
    values[40:60] = np.repeat([1e16, -1e16, 1.0, 3.0], 5)
    return values


def partitions(values: np.ndarray, seed: int) -> list:
    """`values` shuffled and cut into random pieces (some empty)."""
    rng = random.Random(seed)
    shuffled = values.copy()
    np.random.default_rng(seed).shuffle(shuffled)
    cuts = sorted(rng.randrange(len(values) + 1) for _ in range(rng.randrange(1, 12)))
    return np.split(shuffled, cuts)


def combined(parts: list, of, seed: int):
    """The partial results of `parts` merged in a random order and a random tree shape."""
    rng = random.Random(seed)
    pending = [of(part) for part in parts]
    rng.shuffle(pending)
    while len(pending) > 1:
        i = rng.randrange(len(pending) - 1)
        pending[i : i + 2] = [
            pending[i].merge(pending[i + 1]) if rng.random() < 0.5 else pending[i + 1].merge(pending[i])
        ]
    return pending[0]


def bits(stats) -> tuple:
    """Every field, floats as their exact bit pattern (so 0.0 and -0.0 differ)."""
    return tuple(v.hex() if isinstance(v, float) else v for v in dataclasses.astuple(stats))


def readings(stats: NumericStats) -> tuple:
    return tuple(float(v).hex() for v in (stats.sum, stats.mean, stats.variance, stats.std, stats.min, stats.max))


# -- NumericStats ---------------------------------------------------------------------------------------------
def test_numeric_stats_are_the_same_bits_in_any_partition_and_merge_order():
    values = hard_values()
    whole = NumericStats.of(values)
    for seed in range(12):
        merged = combined(partitions(values, seed), NumericStats.of, seed)
        assert bits(merged) == bits(whole)
        assert readings(merged) == readings(whole)


def rounded(value: Fraction) -> float:
    """`value` correctly rounded to float64, infinity beyond the range."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


@pytest.mark.parametrize("largest", [300, 150])
def test_numeric_stats_round_the_exact_values_once(largest):
    values = hard_values()
    values = values[np.abs(values) < 10.0**largest]
    exact = [Fraction(v) for v in values.tolist()]
    n = len(exact)
    mean = sum(exact) / n
    variance = sum((v - mean) ** 2 for v in exact) / n
    stats = NumericStats.of(values)
    assert stats.sum == math.fsum(values.tolist()) == float(sum(exact))
    assert stats.mean == float(mean)
    assert (stats.variance, stats.std) == (rounded(variance), math.sqrt(rounded(variance)))
    assert (stats.count, stats.min, stats.max) == (n, float(min(exact)), float(max(exact)))


def test_numeric_stats_of_ordinary_values():
    stats = NumericStats.of(np.array([1.0, 2.0, 4.0], np.float32))
    assert (stats.count, stats.sum, stats.mean, stats.variance, stats.min, stats.max) == (
        3,
        7.0,
        7 / 3,
        float(Fraction(14, 9)),
        1.0,
        4.0,
    )


def test_numeric_stats_zero_signs_do_not_depend_on_order():
    for order in ([0.0, -0.0], [-0.0, 0.0]):
        stats = NumericStats.of(np.array(order))
        assert (stats.min.hex(), stats.max.hex()) == ("-0x0.0p+0", "0x0.0p+0")
    left, right = NumericStats.of(np.array([0.0])), NumericStats.of(np.array([-0.0]))
    assert bits(left.merge(right)) == bits(right.merge(left))
    assert (left.merge(right).min.hex(), left.merge(right).max.hex()) == ("-0x0.0p+0", "0x0.0p+0")


def test_numeric_stats_count_non_finite_values_apart():
    stats = NumericStats.of(np.array([1.0, math.inf, 3.0]))
    assert (stats.count, stats.mean, stats.pos_inf, stats.sum) == (2, 2.0, 1, math.inf)
    both = stats.merge(NumericStats.of(np.array([-math.inf])))
    assert math.isnan(both.sum) and both.neg_inf == 1
    assert math.isnan(NumericStats.of(np.array([math.nan, 1.0])).sum)


def test_empty_numeric_stats_are_the_identity():
    values = hard_values(100)
    stats = NumericStats.of(values)
    empty = NumericStats.of(np.zeros(0))
    assert bits(empty) == bits(NumericStats())
    assert bits(empty.merge(stats)) == bits(stats.merge(empty)) == bits(stats)
    assert (empty.mean, empty.variance, empty.sum) == (0.0, 0.0, 0.0)


def test_numeric_stats_sum_blocks_beyond_the_int64_bound(monkeypatch):
    monkeypatch.setattr("estimator_lib.data.combine._BLOCK", 7)
    values = hard_values(500)
    assert NumericStats.of(values).sum == math.fsum(values.tolist())


# -- Vocabulary -----------------------------------------------------------------------------------------------
def test_vocabulary_counts_merge_in_any_order_and_rank_by_count_then_text():
    words = np.array(list("abracadabra") * 30 + ["zz", "é", "yy"] * 3)
    whole = Vocabulary.of(words.tolist())
    for seed in range(6):
        merged = combined(partitions(words, seed), lambda p: Vocabulary.of(p.tolist()), seed)
        assert merged.ranked() == whole.ranked()
    assert whole.ranked(4) == [("a", 150), ("b", 60), ("r", 60), ("c", 30)]
    assert whole.ranked()[-3:] == [("yy", 3), ("zz", 3), ("é", 3)]


def test_merge_all_merges_left_to_right():
    parts = [NumericStats.of(np.array([float(i)])) for i in range(5)]
    assert merge_all(parts).mean == 2.0


# -- on Beam --------------------------------------------------------------------------------------------------
def test_beam_combine_globally_gives_the_same_bits_as_one_process():
    beam = pytest.importorskip("apache_beam")
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that, equal_to

    from estimator_lib.data.beam import MergeCombineFn

    values = hard_values()
    expected = bits(NumericStats.of(values))
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        got = (
            pipeline
            | beam.Create(partitions(values, 1))
            | beam.Map(NumericStats.of)
            | beam.CombineGlobally(MergeCombineFn(NumericStats))
            | beam.Map(bits)
        )
        assert_that(got, equal_to([expected]))
