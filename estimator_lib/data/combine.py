"""Order-independent exact statistics: partial results that combine in any order and any grouping to the same
bits, so preparation can be split over workers and merged by Beam's `CombineGlobally` / `CombinePerKey`
(`beam.MergeCombineFn`) or in input order in one process, with the same result.

Floating-point addition is not associative: `Moments.merge` (Chan et al.) and a running `sum` give results that
depend on how the rows were cut and in which order the parts were merged. Here every accumulator holds exact
values instead, and rounds once when the result is read:

  * `NumericStats`: count, the exact sum and exact sum of squares of the values (Python integers in units of
    the smallest power of two a float64 can hold a part of, `2**UNIT` and `2**(2 * UNIT)`), min and max (-0.0
    is less than 0.0, so a tie has one answer), and the NaN / infinity counts. The mean and the population
    variance are the exact quotients rounded once; the standard deviation is `math.sqrt` of that variance.
  * `Vocabulary`: the count of every distinct value (a Counter's sum is exact); ranked most frequent first,
    ties by text, only when read.

Every class has `merge(other) -> new` (commutative and associative, bit for bit) and an empty value as its
identity. Host CPU only; nothing here touches TensorFlow.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Dict, Iterable, List, Tuple

import numpy as np

# A finite float64 is M * 2**(e - 53) with |M| < 2**53 and e from np.frexp (>= -1073): a multiple of 2**UNIT.
UNIT = -1126
_SIGNIFICAND = 53
_BLOCK = 1 << 24  # values per exact int64 partial sum (see `_exact_integers`)
_LOW26 = (1 << 26) - 1
_LOW18 = (1 << 18) - 1


@dataclasses.dataclass(frozen=True)
class NumericStats:
    """Exact, order-independent statistics of a numeric column's present values.

    Attributes:
      count: finite values. total, squares: their exact sum (units 2**UNIT) and sum of squares (units
      2**(2 * UNIT)). min, max: of the finite values (inf / -inf when there are none). nan, pos_inf, neg_inf:
      the non-finite values, counted apart.
    """

    count: int = 0
    total: int = 0
    squares: int = 0
    min: float = math.inf
    max: float = -math.inf
    nan: int = 0
    pos_inf: int = 0
    neg_inf: int = 0

    @classmethod
    def of(cls, values: np.ndarray) -> "NumericStats":
        """The statistics of a float array (any float dtype; float32 values are exact in float64)."""
        values = np.asarray(values, dtype=np.float64).ravel()
        finite = values[np.isfinite(values)]
        total, squares = _exact_integers(finite)
        low, high = _extremes(finite)
        return cls(
            count=len(finite),
            total=total,
            squares=squares,
            min=low,
            max=high,
            nan=int(np.isnan(values).sum()),
            pos_inf=int((values == math.inf).sum()),
            neg_inf=int((values == -math.inf).sum()),
        )

    def merge(self, other: "NumericStats") -> "NumericStats":
        return NumericStats(
            count=self.count + other.count,
            total=self.total + other.total,
            squares=self.squares + other.squares,
            min=_smaller(self.min, other.min),
            max=_larger(self.max, other.max),
            nan=self.nan + other.nan,
            pos_inf=self.pos_inf + other.pos_inf,
            neg_inf=self.neg_inf + other.neg_inf,
        )

    @property
    def sum(self) -> float:
        """The sum of every value, rounded once (NaN or +-inf as float addition gives them, whatever the order)."""
        special = self._non_finite()
        if special is not None:
            return special
        return _ratio(self.total, 1, -UNIT)

    @property
    def mean(self) -> float:
        """The mean of the finite values, rounded once (0.0 when there are none)."""
        return _ratio(self.total, self.count, -UNIT) if self.count else 0.0

    @property
    def variance(self) -> float:
        """The population variance of the finite values: (n * squares - total**2) / n**2, rounded once."""
        if not self.count:
            return 0.0
        return _ratio(self.count * self.squares - self.total * self.total, self.count * self.count, -2 * UNIT)

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    def _non_finite(self):
        if self.nan or (self.pos_inf and self.neg_inf):
            return math.nan
        if self.pos_inf:
            return math.inf
        return -math.inf if self.neg_inf else None


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """The count of every distinct value of a categorical column (present values only)."""

    counts: Dict[str, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, values: Iterable[str]) -> "Vocabulary":
        return cls(dict(collections.Counter(values)))

    def merge(self, other: "Vocabulary") -> "Vocabulary":
        merged = collections.Counter(self.counts)
        merged.update(other.counts)
        return Vocabulary(dict(merged))

    def ranked(self, limit: int = -1) -> List[Tuple[str, int]]:
        """(value, count), most frequent first, ties by text; the first `limit` (all when negative)."""
        out = sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))
        return out if limit < 0 else out[:limit]


def merge_all(parts: Iterable):
    """The merge of every part (at least one), left to right; any order gives the same result."""
    iterator = iter(parts)
    out = next(iterator)
    for part in iterator:
        out = out.merge(part)
    return out


def _exact_integers(values: np.ndarray) -> Tuple[int, int]:
    """The exact sum and sum of squares of finite float64 values, in units of 2**UNIT and 2**(2 * UNIT).

    Each value is M * 2**(e - 53). Per exponent the significands are summed as int64 in two parts (M = h * 2**26
    + l) and their squares in five (|M| = a * 2**36 + b * 2**18 + c); every part sum stays below 2**63 for up to
    `_BLOCK` values, and the per-exponent sums are shifted and added as Python integers."""
    total = squares = 0
    for start in range(0, len(values), _BLOCK):
        block = values[start : start + _BLOCK]
        fraction, exponent = np.frexp(block)
        significand = (fraction * 2.0**_SIGNIFICAND).astype(np.int64)
        shift = exponent.astype(np.int64) - _SIGNIFICAND - UNIT
        order = np.argsort(shift, kind="stable")
        shift, significand = shift[order], significand[order]
        starts = np.flatnonzero(np.r_[True, shift[1:] != shift[:-1]])
        part_total, part_squares = _per_exponent(significand, starts)
        for k, at in enumerate(starts.tolist()):
            total += part_total[k] << int(shift[at])
            squares += part_squares[k] << (2 * int(shift[at]))
    return total, squares


def _per_exponent(significand: np.ndarray, starts: np.ndarray) -> Tuple[List[int], List[int]]:
    """The exact sum of the significands and of their squares between consecutive `starts`."""
    if not len(significand):
        return [], []

    def sums(part: np.ndarray) -> List[int]:
        return [int(v) for v in np.add.reduceat(part, starts).tolist()]

    high, low = sums(significand >> 26), sums(significand & _LOW26)
    magnitude = np.abs(significand)
    a, b, c = magnitude >> 36, (magnitude >> 18) & _LOW18, magnitude & _LOW18
    terms = [sums(a * a), sums(2 * a * b), sums(b * b + 2 * a * c), sums(2 * b * c), sums(c * c)]
    totals = [(h << 26) + lo for h, lo in zip(high, low)]
    squares = [(t72 << 72) + (t54 << 54) + (t36 << 36) + (t18 << 18) + t0 for t72, t54, t36, t18, t0 in zip(*terms)]
    return totals, squares


def _ratio(numerator: int, denominator: int, scale: int) -> float:
    """numerator / (denominator * 2**scale), correctly rounded (Python's int division rounds once); beyond the
    float range, infinity of the numerator's sign."""
    if numerator == 0:
        return 0.0
    try:
        return numerator / (denominator << scale)
    except OverflowError:
        return math.inf if numerator > 0 else -math.inf


def _extremes(values: np.ndarray) -> Tuple[float, float]:
    """(min, max) of finite values with -0.0 < 0.0, so the answer does not depend on which zero came first."""
    if not len(values):
        return math.inf, -math.inf
    low, high = float(values.min()), float(values.max())
    if low == 0.0:
        low = -0.0 if np.signbit(values[values == 0.0]).any() else 0.0
    if high == 0.0:
        high = 0.0 if (~np.signbit(values[values == 0.0])).any() else -0.0
    return low, high


def _smaller(a: float, b: float) -> float:
    if a == b:
        return a if math.copysign(1.0, a) < 0 else b
    return a if a < b else b


def _larger(a: float, b: float) -> float:
    if a == b:
        return b if math.copysign(1.0, a) < 0 else a
    return a if a > b else b
