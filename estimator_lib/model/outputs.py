"""What the model's prediction batches hold, and the host-side filter that drops padded rows.

On a TPU every predict batch is full: the input is padded with empty Examples marked `is_padding` = 1, and
each row carries its input position `example_index`. `real_rows` runs on the host CPU after each batch and keeps
only real rows, checking that they come back complete and in input order.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Tuple

import numpy as np

from estimator_lib.schema import CLASSIFICATION, INDEX_FEATURE, PADDING_FEATURE, Schema

Batch = Dict[str, Any]


class PredictionError(RuntimeError):
    """Predictions do not line up with the input (order, count, padding) or are not finite."""


def output_keys(schema: Schema) -> Tuple[str, ...]:
    """The model outputs a prediction row is made of (also what export verification compares)."""
    return ("class_ids", "probabilities") if schema.label.task == CLASSIFICATION else ("predictions",)


def real_rows(prediction_batches: Iterator[Batch], count: int) -> Iterator[Batch]:
    """Drops padding from whole prediction batches, checking order and count on the way.

    Args:
      prediction_batches: dicts of numpy arrays [B, ...] holding `is_padding` float32 [B] and
        `example_index` int32 [B] next to the model outputs (`yield_single_examples=False`).
      count: real rows in the input.

    Yields:
      The same dicts restricted to real rows, without the two marker arrays.

    Raises:
      PredictionError: a real row is not the next input position, padding is not after the last real row,
        or the total differs from `count`.
    """
    expected = 0
    for batch in prediction_batches:
        index, padding = batch[INDEX_FEATURE], batch[PADDING_FEATURE]
        real = padding == 0.0
        n = int(real.sum())
        if not np.array_equal(real, index < count) or not np.array_equal(
            index[real], np.arange(expected, expected + n)
        ):
            raise PredictionError(
                f"prediction batch out of order: expected real rows {expected}..{expected + n - 1} then "
                f"padding (index >= {count}), got example_index={index.tolist()} is_padding={padding.tolist()}"
            )
        expected += n
        outputs = {k: v for k, v in batch.items() if k not in (INDEX_FEATURE, PADDING_FEATURE)}
        if n:
            yield outputs if n == len(real) else {k: v[real] for k, v in outputs.items()}
    if expected != count:
        raise PredictionError(f"the model returned {expected} real rows for {count} input rows")
