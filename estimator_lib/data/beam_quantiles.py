"""profile.json's exact percentiles counted on the Beam workers (`StoredCounter`, a `quantiles.Counter`): the
launcher never reads a chunk's training values. Host CPU only.

The encode pass's worker stores each chunk's training values twice (`store_numbers`): its `ChunkNumbers` (the
keys, about 4 bytes a value) and its `ChunkSummary` (statistics and first-round counts, features x 256 at most).
The launcher merges the summaries (their number grows with the chunks, not the rows) for the statistics and the
first round; each of the three later rounds is one small pipeline:

    numbers references --Reshuffle--> a chunk's sparse counts under the round's groups (any worker)
    --CombineGlobally(sum)--> one int64 [groups x 256] array, written to the work directory

Counts are sums of int64 (exact, order-independent), so the percentiles are `np.percentile`'s bit for bit, as
the in-process engine's, whichever worker counted which chunk.
"""

from __future__ import annotations

import functools
import io
import pickle
import uuid
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np

from estimator_lib import storage
from estimator_lib.data import quantiles
from estimator_lib.data.combine import NumericStats

try:  # the Beam engine's optional extra; the classes below are defined only with it
    import apache_beam as beam
except ImportError:  # pragma: no cover - exercised only without the extra
    beam = None

Run = Callable[[Callable[[Any], None], str], None]  # (build(pipeline), purpose) -> the pipeline run to its end
StoredChunk = Tuple[str, str]  # a chunk's (ChunkNumbers URI, ChunkSummary URI)
COUNTS = "quantile-counts"  # the rounds' results, in the work directory


def store_numbers(stored: StoredChunk, values: Dict[int, np.ndarray]) -> None:
    """Stores a chunk's training values ({feature index: '<f4' [rows]}, NaN where missing) as the counter reads
    them: its `ChunkNumbers` for the workers, its `ChunkSummary` for the launcher."""
    numbers = quantiles.chunk_numbers(values)
    _write_pickle(stored[0], numbers)
    _write_pickle(stored[1], quantiles.chunk_summary(numbers))


class StoredCounter:
    """`quantiles.Counter` over the chunks `store_numbers` stored: the launcher merges their summaries (read
    once, `read` reading a few ahead); every later round is one pipeline (`run`) counting on the workers.

    Args:
      chunks: () -> the stored chunks, read when the counting starts (the encode pass stores them first).
      work: the work directory, where each round's counts are left for the launcher.
      run: runs a pipeline (`beam.run_pipeline` on the engine's runner).
      read: the unpickled files of some URIs, in order (`beam.read_pickles`).
    """

    def __init__(
        self,
        chunks: Callable[[], List[StoredChunk]],
        work: str,
        run: Run,
        read: Callable[[Iterable[str]], Iterator[Any]],
    ):
        self._chunks, self._work, self._run, self._read = chunks, work, run, read
        self._merged: Optional[Tuple[List[StoredChunk], Dict[int, Tuple[int, NumericStats]], Dict]] = None

    def summaries(self) -> Dict[int, Tuple[int, NumericStats]]:
        return self._summaries()[1]

    def count(self, groups: np.ndarray, shift: int) -> np.ndarray:
        if shift == quantiles.FIRST_SHIFT:
            return quantiles.first_round(self._summaries()[2], groups)
        if not len(groups):
            return np.zeros(0, np.int64)
        result = storage.join(self._work, COUNTS, f"{shift:02d}-{uuid.uuid4().hex[:8]}.npy")
        numbers = [uri for uri, _ in self._chunks()]
        build = functools.partial(_count_pipeline, numbers=numbers, groups=groups, shift=shift, result=result)
        self._run(build, "prepare-quantiles")
        return np.load(io.BytesIO(storage.read_bytes(result)), allow_pickle=False)  # the work directory goes later

    def _summaries(self) -> Tuple[List[StoredChunk], Dict[int, Tuple[int, NumericStats]], Dict]:
        """(the chunks, their merged `summaries`, their `first_counts`), merged once per set of stored chunks."""
        chunks = list(self._chunks())
        if self._merged is None or self._merged[0] != chunks:
            parts = list(self._read(summary for _, summary in chunks))
            self._merged = chunks, quantiles.summaries(parts), quantiles.first_counts(parts)
        return self._merged


def _count_pipeline(pipeline: Any, numbers: List[str], groups: np.ndarray, shift: int, result: str) -> None:
    """numbers references --Reshuffle--> each chunk's sparse counts --CombineGlobally(sum)--> `result`."""
    _ = (
        pipeline
        | "Chunks" >> beam.Create(numbers)
        | "SpreadChunks" >> beam.Reshuffle()
        | "Count" >> beam.Map(_chunk_counts, groups=groups, shift=shift)
        | "Sum" >> beam.CombineGlobally(_SumCounts(len(groups) * 256))
        | "Write" >> beam.Map(_write_npy, result)
    )


def _chunk_counts(uri: str, groups: np.ndarray, shift: int) -> Tuple[np.ndarray, np.ndarray]:
    return quantiles.chunk_counts(pickle.loads(storage.read_bytes(uri)), groups, shift)


def _write_pickle(uri: str, value: Any) -> None:
    storage.write_bytes(uri, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def _write_npy(counts: np.ndarray, uri: str) -> None:
    buffer = io.BytesIO()
    np.save(buffer, counts, allow_pickle=False)
    storage.write_bytes(uri, buffer.getvalue())


if beam is not None:

    class _SumCounts(beam.CombineFn):
        """Sums the chunks' sparse counts into one int64 [size] array: exact, in any order and grouping."""

        def __init__(self, size: int):
            self._size = size

        def create_accumulator(self) -> np.ndarray:
            return np.zeros(self._size, np.int64)

        def add_input(self, accumulator: np.ndarray, part: Tuple[np.ndarray, np.ndarray]) -> np.ndarray:
            slots, counts = part
            accumulator[slots] += counts  # each slot once per part
            return accumulator

        def merge_accumulators(self, accumulators: Iterable[np.ndarray]) -> np.ndarray:
            total = self.create_accumulator()
            for accumulator in accumulators:
                total += accumulator
            return total

        def extract_output(self, accumulator: np.ndarray) -> np.ndarray:
            return accumulator
