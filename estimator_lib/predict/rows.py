"""Batches of rows on the host CPU, as the prediction paths pass them between reading, joining and writing.

Two kinds of batch, both of n rows:
  * `Batch`: the model's outputs, {name: array [n, ...]} (e.g. "probabilities" float32 [n, classes]).
  * `HostRows`: what the host read from the records, {KEY_FEATURE: key bytes [n], column name: (value [n],
    present bool [n])} for each passthrough column.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, TypeVar

import numpy as np

Batch = Dict[str, np.ndarray]
HostRows = Dict[str, Any]
Rows = TypeVar("Rows", Batch, HostRows)


def slice_rows(batch: Rows, start: int, end: Optional[int]) -> Rows:
    """Rows [start:end) of a batch whose values are arrays or (value, present) tuples of arrays."""
    return {
        name: tuple(v[start:end] for v in value) if isinstance(value, tuple) else value[start:end]
        for name, value in batch.items()
    }


def concat_rows(batches: List[Rows]) -> Rows:
    """The batches' rows one after another, as one batch (every batch has the same names and kinds)."""
    out: Dict[str, Any] = {}
    for name, first in batches[0].items():
        if isinstance(first, tuple):
            out[name] = tuple(np.concatenate([b[name][i] for b in batches]) for i in range(len(first)))
        else:
            out[name] = np.concatenate([b[name] for b in batches])
    return out
