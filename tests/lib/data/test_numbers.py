"""One definition of a number: what float() reads, what is valid (float32-finite), what is whole."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from estimator_lib.data import numbers

LIMIT = numbers.FLOAT32_LIMIT
BELOW = math.nextafter(LIMIT, 0.0)  # the largest float64 whose float32 is finite


def test_the_limit_is_where_float32_rounding_overflows():
    assert struct.pack("<f", BELOW) == struct.pack("<f", 3.4028234663852886e38)  # FLT_MAX
    with pytest.raises(OverflowError):
        struct.pack("<f", LIMIT)
    with np.errstate(over="ignore"):
        assert np.isfinite(np.float32(BELOW)) and np.isinf(np.array([LIMIT]).astype(np.float32)[0])


@pytest.mark.parametrize(
    "text, expected",
    [("1.5", 1.5), ("-0", -0.0), ("1e-3", 0.001), ("1_000", 1000.0), ("٣", 3.0), ("3.4028235e38", 3.4028235e38)],
)
def test_valid_numbers(text, expected):
    assert numbers.number(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("abc", "'abc' is not a number (the column is numeric)"),
        ("1.2.3", "'1.2.3' is not a number (the column is numeric)"),
        ("nan", "'nan' is not a finite number (the column is numeric; write a missing-value token such as NA instead)"),
        (
            "-Inf",
            "'-Inf' is not a finite number (the column is numeric; write a missing-value token such as NA instead)",
        ),
        ("1e39", "'1e39' is outside the float32 range (the column is numeric; |x| must be < 3.4e38)"),
        ("-3.5e38", "'-3.5e38' is outside the float32 range (the column is numeric; |x| must be < 3.4e38)"),
    ],
)
def test_invalid_numbers_say_why(text, message):
    with pytest.raises(numbers.InvalidNumber) as e:
        numbers.number(text)
    assert e.value.explained("the column is numeric") == message


def test_typed_floats_and_arrays_follow_the_same_definition():
    values = [0.0, -1.5, BELOW, -BELOW, LIMIT, -LIMIT, 1e39, math.inf, -math.inf, math.nan]
    expected = [True] * 4 + [False] * 6
    assert [numbers.is_valid(x) for x in values] == expected
    assert numbers.valid(np.array(values)).tolist() == expected
    assert numbers.finite(2.5, "2.5") == 2.5
    with pytest.raises(numbers.InvalidNumber, match=r"^inf is not a finite number$"):
        numbers.finite(math.inf, "inf")


def test_whole_numbers_and_their_text():
    assert [numbers.whole_text(x) for x in (3.0, -0.0, 1e20, 2.5, math.inf, math.nan)] == [
        "3",
        "0",
        "100000000000000000000",
        None,
        None,
        None,
    ]
    values = np.array([3.0, -2.0, 2.5, math.inf, math.nan, 0.0])
    assert numbers.whole(values).tolist() == [True, True, False, False, False, True]


def test_reading_is_float_for_every_ascii_start():
    for code in range(128):
        for text in (chr(code) + "1", chr(code), chr(code) + "nf", chr(code) + "an", chr(code) + ".5", chr(code) + "x"):
            try:
                expected = float(text)
            except ValueError:
                expected = None
            got = numbers.read(text)
            assert (got is None and expected is None) or got == expected or (got != got and expected != expected)
    assert numbers.read_all(["1", "x", "nan", " 2", "1e39"])[::2] == [1.0, 2.0]
    assert numbers.read_all(["1", "2.5"]) == [1.0, 2.5]


def test_a_column_marks_missing_and_doubtful_rows():
    floats, f32, present, doubtful = numbers.column(["1.5", None, "abc", "nan", "1e39", "-2"])
    assert present.tolist() == [True, False, False, False, False, True]
    assert doubtful.tolist() == [False, False, True, True, True, False]
    assert floats[[0, 5]].tolist() == [1.5, -2.0] and np.isnan(floats[1:5]).all()
    assert f32.dtype == np.dtype("<f4") and f32[[0, 5]].tolist() == [1.5, -2.0]
    clean = numbers.column(["1", "2"])
    assert clean[2].all() and not clean[3].any()
