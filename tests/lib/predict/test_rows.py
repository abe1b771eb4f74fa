"""Host batches (`predict.rows`): rows sliced and joined alike for plain arrays and (value, present) pairs."""

from __future__ import annotations

import numpy as np

from estimator_lib.predict.rows import concat_rows, slice_rows


def as_lists(batch):
    return {k: tuple(x.tolist() for x in v) if isinstance(v, tuple) else v.tolist() for k, v in batch.items()}


def test_slice_and_concat_handle_arrays_and_value_present_pairs_alike():
    first = {"key": np.array([b"a", b"b", b"c"], object), "x": (np.float32([1, 2, 3]), np.array([1, 0, 1], bool))}
    second = {"key": np.array([b"d"], object), "x": (np.float32([4]), np.array([1], bool))}

    assert as_lists(slice_rows(first, 1, None)) == {"key": [b"b", b"c"], "x": ([2.0, 3.0], [False, True])}
    assert as_lists(slice_rows(first, 0, 0)) == {"key": [], "x": ([], [])}
    assert as_lists(concat_rows([slice_rows(first, 2, None), second])) == {
        "key": [b"c", b"d"],
        "x": ([3.0, 4.0], [True, True]),
    }
    outputs = {"probabilities": np.float32([[0.5, 0.5], [1, 0]])}
    assert as_lists(slice_rows(outputs, 1, 2)) == {"probabilities": [[1.0, 0.0]]}
