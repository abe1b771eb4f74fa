"""The eval rows the candidate predicted worst, with where they came from, for the evaluation report. Host CPU.

A row's loss is its log loss (-log of the probability given to its true class) for classification and its absolute
error for regression. The worst rows' original feature values are read back from the prepared eval records (only
those records are parsed), and their input file and line from the prepared dataset's eval places
(`data.places`), by key.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from estimator_lib.data import places
from estimator_lib.evaluation.metrics import Scores, Truth
from estimator_lib.evaluation.slices import read_original_values
from estimator_lib.schema import Schema

WORST_ROWS = 10
_FLOOR = 1e-15  # a probability of 0 for the true class: a finite log loss, as metrics.log_loss clips


def row_losses(truth: Truth, scores: Scores) -> np.ndarray:
    """float64 [N]: each eval row's log loss (classification) or absolute error (regression)."""
    if truth.classes:
        index = {c: i for i, c in enumerate(truth.classes)}
        true_class = np.array([index[label] for label in truth.labels], dtype=np.int64)
        given = scores.probabilities[np.arange(len(true_class)), true_class]
        return -np.log(np.clip(given.astype(np.float64), _FLOOR, 1.0))
    return np.abs(truth.labels.astype(np.float64) - scores.predicted.astype(np.float64))


def worst_rows(
    truth: Truth,
    scores: Scores,
    schema: Schema,
    files: str,
    eval_places: Optional[np.ndarray],
    input_names: Sequence[str],
    count: int = WORST_ROWS,
) -> List[Dict[str, Any]]:
    """The `count` eval rows of highest loss, worst first (ties in read order).

    Args:
      truth, scores: the eval rows (in the order of the records in `files`) and the candidate's scores.
      schema: the prepared schema; files: the eval split's file pattern.
      eval_places: the prepared dataset's eval places (`places.read_places`), or None when it has none.
      input_names: the input files' names, in the prepared manifest's `inputs` order.

    Returns:
      [{"key", "label", "predicted", "probability" (of the predicted class; None for regression), "loss",
      "source": {"file", "line"} or None, "values": {feature: original value, None when missing}}].
    """
    losses = row_losses(truth, scores)
    worst = np.argsort(-losses, kind="stable")[:count].tolist()
    names = [f.name for f in schema.features]
    keys, columns = read_original_values(schema, [files], names, positions=worst)
    values = {key: {n: _plain(columns[n][i]) for n in names} for i, key in enumerate(keys)}
    return [_row(truth, scores, i, float(losses[i]), values, eval_places, input_names, schema) for i in worst]


def _row(truth, scores, i, loss, values, eval_places, input_names, schema) -> Dict[str, Any]:
    key = truth.keys[i]
    if key not in values:
        raise ValueError(f"eval row {i} has key {key!r} in the labels and another in the records; read them again")
    probability = None
    if truth.classes:
        probability = float(scores.probabilities[i, list(truth.classes).index(scores.predicted[i])])
    place = (
        None if eval_places is None else places.place_of(eval_places, key, schema.key_column is not None, input_names)
    )
    return {
        "key": key,
        "label": _plain(truth.labels[i]),
        "predicted": _plain(scores.predicted[i]),
        "probability": probability,
        "loss": loss,
        "source": None if place is None else {"file": place[0], "line": place[1]},
        "values": values[key],
    }


def _plain(value: Any) -> Any:
    """A JSON value: NumPy numbers as Python's, NaN (a missing number) as None."""
    if isinstance(value, (np.floating, float)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value
