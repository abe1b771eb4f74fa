"""What a number is, for every reader and encoder of the data package (one definition, used by all).

A text *reads as a number* when Python's `float()` accepts it (after `read.clean`'s strip): "1.5", "-0",
"1e-3", "1_000", also "nan", "inf" and "1e39". Pass 1 counts such texts when it infers column types, so a
numeric column with a stray "nan" stays numeric and the row is reported, not the column retyped.

A *valid number* is one a `tf.train.Example` can hold: it reads as a number, and rounded to float32 (what a
FloatList stores) it is finite. That is exactly `-FLOAT32_LIMIT < float(text) < FLOAT32_LIMIT`: one comparison
refuses NaN (every comparison with NaN is false), the infinities, and the finite float64 values that float32
rounding turns into infinity. Pass 2 (`encode`), the records encoder (`records`) and the column-at-a-time
checks all use `number` or `valid` below, so they accept and refuse the same values with the same words.

A *whole number* reads as a number and is finite and integral; its canonical text is `str(int(x))` ("3.0",
"3", "3e0" -> "3"), the text an integer categorical or a whole-number class is stored and looked up as.

Pure Python and numpy (no TensorFlow): worker processes import it cheaply.
"""

from __future__ import annotations

import math
from typing import List, NoReturn, Optional, Sequence, Tuple

import numpy as np

# The smallest float64 that rounds to float32 infinity: half a float32 ulp above FLT_MAX (2**128 - 2**104),
# where round-to-nearest-even goes up to 2**128. Below it float32 rounding is finite.
FLOAT32_LIMIT = 2.0**128 - 2.0**103
# Every ASCII character a text that float() reads can start with (digits, sign, point, inf, nan, the white
# space float() strips); lets `read` skip float()'s costly ValueError for the common non-number. A non-ASCII
# start (other digits, other white space) goes to float().
_NUMBER_STARTS = frozenset("0123456789+-.iInN \t\n\r\x0b\x0c")


class InvalidNumber(ValueError):
    """A text that is not a valid number: `problem` says what it is, `fix` (may be empty) what to do."""

    def __init__(self, problem: str, fix: str = ""):
        super().__init__(problem)
        self.problem, self.fix = problem, fix

    def explained(self, context: str) -> str:
        """ "'abc' is not a number (the column is numeric)": the problem with its context and fix."""
        inside = "; ".join(part for part in (context, self.fix) if part)
        return f"{self.problem} ({inside})" if inside else self.problem


def number(text: str) -> float:
    """float(text) when `text` is a valid number; raises InvalidNumber saying why not."""
    try:
        x = float(text)
    except ValueError:
        raise InvalidNumber(f"{text!r} is not a number") from None
    # `is_valid(x)` written out: this runs for every numeric value of every row of pass 2's per-row path.
    return x if -FLOAT32_LIMIT < x < FLOAT32_LIMIT else _refused(x, repr(text))


def finite(x: float, shown: str) -> float:
    """`x` when it is a valid number; raises InvalidNumber naming it as `shown` otherwise."""
    return x if is_valid(x) else _refused(x, shown)


def is_valid(x: float) -> bool:
    """True when the float `x` is a valid number (finite, and finite as float32)."""
    return -FLOAT32_LIMIT < x < FLOAT32_LIMIT


def _refused(x: float, shown: str) -> NoReturn:
    if not math.isfinite(x):
        raise InvalidNumber(f"{shown} is not a finite number", "write a missing-value token such as NA instead")
    raise InvalidNumber(f"{shown} is outside the float32 range", "|x| must be < 3.4e38")


def valid(numbers: np.ndarray) -> np.ndarray:
    """bool [n]: `is_valid` of each float64 (NaN, standing for missing, is not valid)."""
    with np.errstate(invalid="ignore"):
        return np.abs(numbers) < FLOAT32_LIMIT


def whole_text(x: float) -> Optional[str]:
    """The canonical text of a whole number (3.0 -> "3"); None when `x` is not finite and integral."""
    return str(int(x)) if x.is_integer() else None


def whole(numbers: np.ndarray) -> np.ndarray:
    """bool [n]: the float64 values that are whole numbers (finite and integral)."""
    return np.isfinite(numbers) & (np.trunc(numbers) == numbers)


# -- reading texts as numbers (type inference, column-at-a-time checks) ------------------------------------------------
def read(text: str) -> Optional[float]:
    """float(text), or None when the text does not read as a number."""
    if text[:1] not in _NUMBER_STARTS and text[:1].isascii():
        return None
    try:
        return float(text)
    except ValueError:
        return None


def read_all(texts: Sequence[str]) -> List[float]:
    """The float() of every text that reads as a number, in order (the others left out)."""
    try:
        return list(map(float, texts))  # one C loop for a clean column
    except ValueError:
        pass
    out = []
    for text in texts:  # `read` written out: no call per text of a text column
        if text[:1] in _NUMBER_STARTS or not text[:1].isascii():
            try:
                out.append(float(text))
            except ValueError:
                pass
    return out


def column(values: Sequence[Optional[str]]) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(float64 numbers, their float32, present, doubtful) of a cleaned column (None: missing).

    A doubtful row holds text that is not a valid number; `encode`'s per-row path reports it. Missing and
    doubtful rows hold NaN."""
    try:
        numbers = np.fromiter(map(float, values), np.float64, len(values))  # one C loop for a clean column
        present, doubtful = np.ones(len(numbers), bool), np.zeros(len(numbers), bool)
    except (TypeError, ValueError):
        numbers, present, doubtful = _one_by_one(values)
    return checked(numbers, present, doubtful)


def checked(
    numbers: np.ndarray, present: np.ndarray, doubtful: Optional[np.ndarray] = None
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`column`'s result from a column's float64 numbers (NaN where absent), present and doubtful rows: a
    present number that is not `valid` makes its row doubtful."""
    doubtful = np.zeros(len(numbers), bool) if doubtful is None else doubtful
    bad = present & ~valid(numbers)
    numbers[bad] = np.nan
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = numbers.astype("<f4")
    return numbers, f32, present & ~bad, doubtful | bad


def _one_by_one(values: Sequence[Optional[str]]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    numbers = np.full(len(values), np.nan)
    present, doubtful = np.zeros(len(values), bool), np.zeros(len(values), bool)
    for i, text in enumerate(values):
        if text is None:
            continue
        x = read(text)
        if x is None:
            doubtful[i] = True
        else:
            numbers[i], present[i] = x, True
    return numbers, present, doubtful
