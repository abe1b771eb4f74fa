"""Exact percentiles of values spread over many chunks, holding none of them all at once. Host CPU only.

`np.percentile(values, range(101))` (linear interpolation) reads the sorted values at a few ranks only: two per
percentile (`ranks`). `select` finds the values at those ranks by a radix selection over the chunks: the float32
values as order-keeping 32-bit keys, 8 bits a round, each round counting the chunks' keys under the prefixes
still wanted (at most 2 * 101 prefixes of 256 counts); four reads of the chunks give every wanted key exactly.
`percentiles` then interpolates as numpy does, so the result is `np.percentile`'s, bit for bit, and it does not
depend on how the values were cut into chunks or in which order the chunks come.

A chunk is {feature index: '<f4' [values]}, NaN for a missing value (left out).
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, Iterator, List, Tuple

import numpy as np

from estimator_lib.data.combine import NumericStats

POINTS = np.arange(101)
_DIGIT_BITS = 8
_ROUNDS = 32 // _DIGIT_BITS
_SIGN = np.uint32(0x80000000)

Chunks = Callable[[], Iterator[Dict[int, np.ndarray]]]  # a fresh pass over the chunks, in any order


def ranks(n: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(previous rank, next rank, weight) per percentile 0..100 of `n` sorted values, as `np.percentile`'s linear
    method computes them (a rank numpy sets to -1, the last value, given as n - 1)."""
    virtual = (n - 1) * np.true_divide(POINTS, 100)
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1
    previous[above] = -1
    following[above] = -1
    previous, following = previous.astype(np.intp), following.astype(np.intp)
    gamma = virtual - previous
    return np.where(previous < 0, n - 1, previous), np.where(following < 0, n - 1, following), gamma


def percentiles(n: int, value_at: Dict[int, float]) -> List[float]:
    """The 0th..100th percentiles of `n` values from the values at `ranks(n)` ({rank: value}), as numpy's
    `_lerp` interpolates (the same float64 operations in the same order)."""
    previous, following, gamma = ranks(n)
    a = np.array([value_at[int(r)] for r in previous], dtype=np.float64)
    b = np.array([value_at[int(r)] for r in following], dtype=np.float64)
    with np.errstate(invalid="ignore"):  # infinite values give NaN, as in numpy
        diff = np.subtract(b, a)
        out = np.asanyarray(np.add(a, diff * gamma))
        np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe", dtype=type(out.dtype))
    return [float(v) for v in out]


def order_keys(values: np.ndarray) -> np.ndarray:
    """uint32 keys that sort as the float32 values do (-0.0 taken as 0.0: numpy's sort does not tell them apart)."""
    values = np.asarray(values, dtype=np.float32) + np.float32(0.0)  # -0.0 + 0.0 is 0.0
    bits = values.view(np.uint32)
    return np.where(bits & _SIGN, ~bits, bits | _SIGN)


def key_values(keys: np.ndarray) -> np.ndarray:
    """The float32 values of `order_keys`' keys."""
    keys = np.asarray(keys, dtype=np.uint32)
    return np.where(keys & _SIGN, keys & ~_SIGN, ~keys).view(np.float32)


def present(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float32)
    return values[~np.isnan(values)]


def summaries(chunks: Iterable[Dict[int, np.ndarray]]) -> Dict[int, Tuple[int, NumericStats]]:
    """Per feature, (present values, the exact statistics of their float64 values) over every chunk."""
    out: Dict[int, Tuple[int, NumericStats]] = {}
    for chunk in chunks:
        for index, values in chunk.items():
            mine = present(values)
            count, stats = out.get(index, (0, NumericStats()))
            out[index] = (count + len(mine), stats.merge(NumericStats.of(mine.astype(np.float64))))
    return out


def select(chunks: Chunks, wanted: Dict[int, np.ndarray]) -> Dict[int, Dict[int, float]]:
    """{feature: {rank: value}}: the values at the `wanted` ranks ({feature: int ranks}) of the sorted present
    values of every chunk, by four rounds of 8-bit radix selection (four passes over `chunks`)."""
    prefix = {i: np.zeros(len(r), np.uint64) for i, r in wanted.items()}
    remaining = {i: np.asarray(r, np.int64).copy() for i, r in wanted.items()}
    for round_ in range(_ROUNDS):
        shift = 32 - _DIGIT_BITS * (round_ + 1)
        groups = {i: np.unique(p) for i, p in prefix.items()}
        counts = {i: np.zeros(len(g) << _DIGIT_BITS, np.int64) for i, g in groups.items()}
        for chunk in chunks():
            for index, values in chunk.items():
                if index in groups:
                    counts[index] += _digit_counts(order_keys(present(values)), groups[index], shift)
        for index in wanted:
            _descend(prefix[index], remaining[index], groups[index], counts[index])
    return {
        i: dict(zip(np.asarray(r).tolist(), key_values(prefix[i].astype(np.uint32)).astype(np.float64).tolist()))
        for i, r in wanted.items()
    }


def _digit_counts(keys: np.ndarray, groups: np.ndarray, shift: int) -> np.ndarray:
    """Counts of the keys under each prefix of `groups` (sorted) by their next 8 bits, [len(groups) * 256]."""
    wide = keys.astype(np.uint64)
    high = wide >> np.uint64(shift + _DIGIT_BITS)
    digit = ((wide >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.int64)
    at = np.searchsorted(groups, high)
    inside = at < len(groups)
    inside[inside] = groups[at[inside]] == high[inside]
    return np.bincount((at[inside] << _DIGIT_BITS) + digit[inside], minlength=len(groups) << _DIGIT_BITS)


def _descend(prefix: np.ndarray, remaining: np.ndarray, groups: np.ndarray, counts: np.ndarray) -> None:
    """One round's choice for each wanted rank: the digit whose keys hold it; its rank among them."""
    table = counts.reshape(len(groups), 1 << _DIGIT_BITS)
    for k in range(len(prefix)):
        cumulative = np.cumsum(table[int(np.searchsorted(groups, prefix[k]))])
        digit = int(np.searchsorted(cumulative, remaining[k], side="right"))
        if digit == len(cumulative):
            raise AssertionError(f"rank {remaining[k]} is beyond the {int(cumulative[-1])} values counted")
        remaining[k] -= int(cumulative[digit - 1]) if digit else 0
        prefix[k] = (int(prefix[k]) << _DIGIT_BITS) | digit


def profile_numbers(chunks: Chunks) -> Dict[int, Tuple[int, NumericStats, List[float]]]:
    """Per feature: (present values, the exact statistics of their float64 values, their 0th..100th percentiles
    as `np.percentile` gives them; [] without values), from five passes over `chunks`, one chunk at a time."""
    found = summaries(chunks())
    wanted = {i: np.unique(np.concatenate(ranks(n)[:2])) for i, (n, _) in found.items() if n}
    values = select(chunks, wanted)
    return {i: (n, stats, percentiles(n, values[i]) if n else []) for i, (n, stats) in found.items()}
