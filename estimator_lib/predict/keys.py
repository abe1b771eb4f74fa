"""Joining prediction batches to their keys and passthrough columns, on the host CPU.

A string cannot pass through a TPU computation, so each key travels through the model packed into int32
(`data.example_keys`) and comes back with its row's predictions; it is unpacked here. The records are read a
second time (`columns.read_host_columns`) only for passthrough columns (then from the first row) or from the
predict batch holding the first key longer than `example_keys.MAX_KEY_BYTES` on.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from estimator_lib.data import example_keys
from estimator_lib.data.example_keys import KEY_BYTES_FEATURE
from estimator_lib.model.outputs import PredictionError
from estimator_lib.predict.columns import Column, read_host_columns
from estimator_lib.predict.rows import Batch, HostRows, concat_rows, slice_rows
from estimator_lib.schema import KEY_FEATURE, Schema


class RowBuffer:
    """Hands out host-side rows in the counts the prediction batches need (batches may not align)."""

    def __init__(self, batches: Iterator[HostRows]):
        self._batches = batches
        self._pending: List[HostRows] = []
        self._available = 0

    def take(self, n: int) -> HostRows:
        """The next n rows; raises PredictionError when the host read ends first."""
        while self._available < n:
            batch = next(self._batches, None)
            if batch is None:
                raise PredictionError(
                    f"the model returned more real rows than the host pass read ({self._available} left, "
                    f"{n} needed): the input files changed while predicting; rerun on a stable input"
                )
            self._pending.append(batch)
            self._available += len(batch[KEY_FEATURE])
        merged = self._pending[0] if len(self._pending) == 1 else concat_rows(self._pending)
        taken, rest = slice_rows(merged, 0, n), slice_rows(merged, n, None)
        self._pending = [rest] if len(rest[KEY_FEATURE]) else []
        self._available -= n
        return taken

    def assert_exhausted(self) -> None:
        """Raises PredictionError when the host read holds rows that no prediction took."""
        if self._available or next(self._batches, None) is not None:
            raise PredictionError(
                "the host pass read more rows than the model predicted: the input files changed while "
                "predicting; rerun on a stable input"
            )


class KeyedRows:
    """Joins prediction batches (real rows, in input order) to their keys and passthrough columns.

    The keys come back with the predictions, packed by `example_keys`. The records are read a second time,
    on the host, only for passthrough columns (then from the first row) or once a key longer than
    `example_keys.MAX_KEY_BYTES` turns up (then from that row on).

    Attributes:
      report: for the manifest, complete once every row is joined: where the keys came from ("from":
        "predictions", "records" or "predictions, then records") and "records_read_again_from_row".
    """

    def __init__(self, files: List[str], columns: Sequence[Column], schema: Schema, batch_size: int):
        self._files, self._columns, self._schema, self._batch_size = files, columns, schema, batch_size
        self.report: Dict[str, Any] = {"from": "predictions", "records_read_again_from_row": None}

    def join(self, outputs: Iterator[Batch]) -> Iterator[Tuple[HostRows, Batch]]:
        """(host rows, outputs) per piece of each batch, in input order. `outputs` hold the packed keys
        (`KEY_BYTES_FEATURE`, taken out of each batch here) and the model's outputs of real rows only."""
        buffer: Optional[RowBuffer] = None
        position = 0
        for batch in outputs:
            packed = batch.pop(KEY_BYTES_FEATURE, None)
            n = len(next(iter(batch.values())))
            if buffer is None:
                keyed = self._rows_keyed_by_predictions(packed, n)
                if keyed:
                    yield {KEY_FEATURE: example_keys.decode(packed[:keyed])[0]}, slice_rows(batch, 0, keyed)
                    batch, position, n = slice_rows(batch, keyed, None), position + keyed, n - keyed
                if n:  # from the batch holding the first long key on (from the first row with passthrough)
                    buffer = self._read_again_from(position)
            if n:
                yield buffer.take(n), batch
                position += n
        if buffer is not None:
            buffer.assert_exhausted()

    def _read_again_from(self, position: int) -> RowBuffer:
        self.report.update({"from": "records" if position == 0 else "predictions, then records"})
        self.report["records_read_again_from_row"] = position
        host = read_host_columns(self._files, self._columns, self._schema, self._batch_size, position)
        return RowBuffer(host.as_numpy_iterator())

    def _rows_keyed_by_predictions(self, packed: Optional[np.ndarray], n: int) -> int:
        """How many of these n rows take their keys from the predictions: all, or those of the whole predict
        batches before the first key longer than `example_keys.MAX_KEY_BYTES`; none with passthrough columns.
        (On CPU the n rows hold several batches, the first starting at a multiple of the batch size.)"""
        if self._columns or packed is None:
            return 0
        long_keys = np.flatnonzero(packed[:, 0] > example_keys.MAX_KEY_BYTES)
        return n if not len(long_keys) else int(long_keys[0]) // self._batch_size * self._batch_size
