"""Pieces shared by the preparation modules: the error type, split names, row hashing, running moments, and the
escaping of a user's names in Markdown (every Markdown report of the project uses `markdown_text`).

Nothing here touches TensorFlow or storage, so worker processes can use it cheaply.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from estimator_lib.config.run import PREPARED_SPLITS

SPLITS = PREPARED_SPLITS
TRAIN, EVAL, TEST, VALID = SPLITS
_TWO_64 = float(2**64)


# What a user wrote (a column, label, class or file name) may hold markup; a Markdown renderer must show it as
# text. "<", ">" and "&" become character references: CommonMark, GFM and Python-Markdown decode them to text,
# and a renderer that passes raw HTML through (Vertex AI's may) never sees a tag. The other characters that
# start Markdown syntax anywhere in a line get CommonMark's backslash escape (any ASCII punctuation may be
# escaped); "|" escaped is GFM's way to keep a pipe inside its table cell. A line break would end a table row
# or a heading, so it becomes a space.
_MARKDOWN = str.maketrans(
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\n": " ", "\r": " ", **{c: "\\" + c for c in "\\`*_[]#|"}}
)


def markdown_text(value: Any) -> str:
    """`value` as text that Markdown shows literally: in a table cell (keeping the row's cells), a heading, or a
    paragraph. E.g. `markdown_text("<b>|x_1")` is "&lt;b&gt;\\|x\\_1"."""
    return str(value).translate(_MARKDOWN)


class DataError(ValueError):
    """Bad input data; the message names the file, line, column, the value and what was expected."""


def where(file_name: str, line: int, column: Optional[str] = None) -> str:
    """ "data.csv line 7, column 'x'": the prefix of every row-level message."""
    place = f"{file_name} line {line}"
    return f"{place}, column {column!r}" if column is not None else place


def hash64(text: str) -> int:
    """A stable 64-bit hash of text (blake2b; the same on every machine and Python version)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def content_text(items: Iterable[Tuple[str, Optional[str]]]) -> str:
    """The canonical content of a row for its derived key: present values by column name, in name order.

    Missing values are left out, so "" and "NA" (or an absent JSON key) give the same content.
    """
    return "\x1f".join(f"{name}\x1e{value}" for name, value in sorted(items) if value is not None)


def split_index(key_hash: int, eval_fraction: float, test_fraction: float, valid_fraction: float = 0.0) -> int:
    """0 (train), 1 (eval), 2 (test) or 3 (valid) from a row's key hash: a row keeps its split however the data
    grows. The hash's unit interval is cut as [test | eval | valid | train], so the validation split is carved
    from the rows that would otherwise train, and eval and test do not depend on `valid_fraction`."""
    u = key_hash / _TWO_64
    if u < test_fraction:
        return 2
    if u < test_fraction + eval_fraction:
        return 1
    if u < test_fraction + eval_fraction + valid_fraction:
        return 3
    return 0


def split_indices(
    key_hashes: np.ndarray, eval_fraction: float, test_fraction: float, valid_fraction: float = 0.0
) -> np.ndarray:
    """`split_index` of every hash in a uint64 array at once (int8 [rows]); the same cuts, the same floats."""
    u = key_hashes.astype(np.float64) / _TWO_64
    cuts = (test_fraction, test_fraction + eval_fraction, test_fraction + eval_fraction + valid_fraction)
    return np.select([u < cuts[0], u < cuts[1], u < cuts[2]], [2, 1, 3], 0).astype(np.int8)


def derived_key(content_hash: int, occurrence: int) -> str:
    """The key of a row without a key column: its content hash and how many identical rows came before it."""
    return f"{content_hash:016x}-{occurrence}"


@dataclasses.dataclass
class Moments:
    """Count, mean, sum of squared deviations, min and max, mergeable in a fixed order (Chan et al.)."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    min: float = math.inf
    max: float = -math.inf

    @classmethod
    def of(cls, values: Sequence[float]) -> "Moments":
        if not values:
            return cls()
        mean = math.fsum(values) / len(values)
        m2 = math.fsum((v - mean) ** 2 for v in values)
        return cls(len(values), mean, m2, min(values), max(values))

    @classmethod
    def of_array(cls, values: np.ndarray) -> "Moments":
        """`of` for a float64 array, bit for bit: `exact_sum` is `math.fsum`, and each squared deviation is
        Python's `(v - mean) ** 2` (see `_squares`)."""
        if not len(values):
            return cls()
        mean = exact_sum(values) / len(values)
        m2 = exact_sum(_squares(values - mean))
        return cls(len(values), mean, m2, _first_equal(values, values.min()), _first_equal(values, values.max()))

    @classmethod
    def of_arrays(cls, arrays: Sequence[np.ndarray]) -> List["Moments"]:
        """`of_array` of each float64 array, the sums of all of them computed together (`exact_sums`)."""
        lengths = [len(a) for a in arrays]
        values = np.concatenate(arrays) if arrays else np.zeros(0)
        means = [total / n if n else 0.0 for total, n in zip(exact_sums(values, lengths), lengths)]
        squares = exact_sums(_squares(values - np.repeat(means, lengths)), lengths)
        return [
            cls(n, mean, m2, _first_equal(a, a.min()), _first_equal(a, a.max())) if n else cls()
            for a, n, mean, m2 in zip(arrays, lengths, means, squares)
        ]

    def merge(self, other: "Moments") -> "Moments":
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        n = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * other.count / n
        m2 = self.m2 + other.m2 + delta * delta * self.count * other.count / n
        return Moments(n, mean, m2, min(self.min, other.min), max(self.max, other.max))

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.count) if self.count else 0.0


_HALF = 26  # a 53-bit significand as two halves, each summed exactly in float64 by np.bincount


def exact_sum(values: np.ndarray) -> float:
    """`math.fsum` of a float64 array (the correctly rounded exact sum), vectorised: see `exact_sums`."""
    return exact_sums(values, [len(values)])[0]


def exact_sums(values: np.ndarray, lengths: Sequence[int]) -> List[float]:
    """`math.fsum` of each consecutive part of `values` (`lengths` long each), all parts summed at once.

    Each finite value is an integer significand M (|M| < 2**53) times 2**(e - 53). Per part and exponent the
    high and low halves of the significands (M = high * 2**26 + low) are summed by np.bincount in float64,
    exactly while fewer than 2**26 values share them; the few per-exponent sums are added as Python integers,
    and each exact total is rounded once (integer division and int-to-float conversion round correctly).
    Values this cannot sum exactly, and a zero total (whose sign fsum decides), go to `math.fsum`."""
    parts = np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) > 1 else [values]
    if len(values) == 0 or max(lengths) >= 1 << _HALF or not np.isfinite(values).all():
        return [math.fsum(part.tolist()) for part in parts]
    fraction, exponent = np.frexp(values)
    significand = (fraction * 2.0**53).astype(np.int64)
    lowest = int(exponent.min())
    width = int(exponent.max()) - lowest + 1
    bins = np.repeat(np.arange(len(lengths)) * width, lengths) + (exponent - lowest)
    shape = (len(lengths), width)
    high = np.bincount(bins, (significand >> _HALF).astype(np.float64), len(lengths) * width).reshape(shape)
    low = np.bincount(bins, (significand & ((1 << _HALF) - 1)).astype(np.float64), len(lengths) * width).reshape(shape)
    return [_rounded(_integer_sum(high[i], low[i]), lowest - 53, part) for i, part in enumerate(parts)]


def _integer_sum(high: np.ndarray, low: np.ndarray) -> int:
    """The exact sum of the per-exponent half sums, in units of the lowest exponent."""
    total = 0
    for k in np.flatnonzero((high != 0) | (low != 0)).tolist():
        total += ((int(high[k]) << _HALF) + int(low[k])) << k
    return total


def _rounded(total: int, scale: int, part: np.ndarray) -> float:
    """total * 2**scale correctly rounded; `math.fsum(part)` for a zero total or one beyond the float range."""
    if total == 0:
        return math.fsum(part.tolist())
    try:
        return float(total << scale) if scale >= 0 else total / (1 << -scale)
    except OverflowError:  # fsum says so in its own words
        return math.fsum(part.tolist())


def _first_equal(values: np.ndarray, target: float) -> float:
    """The first value equal to `target`, as Python's min and max return it (0.0 and -0.0 are equal)."""
    return float(values[np.argmax(values == target)])


def _squares(d: np.ndarray) -> np.ndarray:
    """`d ** 2` element by element exactly as Python computes it (libm `pow`, which is not always `d * d`).

    `d * d` is correctly rounded; `pow` errs by less than 0.55 units in the last place, so the two can differ
    only where `d * d`'s exact value lies near the middle between two floats. Those few elements (the exact
    rounding error, from Dekker's product, within 0.05 units of a half unit, or a power-of-two result) are
    recomputed with Python's `**`, and so are results too small or too large for that error to be exact."""
    with np.errstate(over="ignore", invalid="ignore"):
        square = d * d
        split = d * 134217729.0  # 2**27 + 1: Dekker's split of d into two 26-bit halves
        high = split - (split - d)
        low = d - high
        error = ((high * high - square) + 2.0 * high * low) + low * low
        unit = np.spacing(np.abs(square))
        near_half = ~(np.abs(np.abs(error) - 0.5 * unit) > 0.05 * unit)  # NaN (overflow) counts as near
    power_of_two = np.frexp(square)[0] == 0.5
    extreme = ~((np.abs(square) > 1e-290) & (np.abs(square) < 1e290))
    for i in np.flatnonzero(near_half | power_of_two | extreme).tolist():
        square[i] = float(d[i]) ** 2
    return square
