"""profile.json's exact percentiles counted on the Beam workers (`StoredCounter`, a `quantiles.Counter`): the
launcher never reads a chunk's training values. Host CPU only.

The encode pass's worker stores each chunk's training values twice (`store_numbers`): its `ChunkNumbers` (the
keys, about 4 bytes a value) and its `ChunkSummary` (statistics and first-round counts, features x 256 at most).
The launcher merges the summaries (their number grows with the chunks, not the rows) for the statistics and the
first round; the three later rounds are one small pipeline, each round's selection a side input of the next:

    numbers references --Reshuffle--> per round: a chunk's sparse counts under the round's groups (any worker)
    --CombineGlobally(sum)--> int64 [groups x 256] --> the next round's `Selection`; the last one written to the
    work directory

Counts are sums of int64 (exact, order-independent), so the percentiles are `np.percentile`'s bit for bit, as
the in-process engine's, whichever worker counted which chunk.
"""

from __future__ import annotations

import dataclasses
import functools
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
SELECTIONS = "quantile-selections"  # the selections the pipelines end with, in the work directory
PURPOSE = "prepare-quantiles"


def store_numbers(stored: StoredChunk, values: Dict[int, np.ndarray]) -> None:
    """Stores a chunk's training values ({feature index: '<f4' [rows]}, NaN where missing) as the counter reads
    them: its `ChunkNumbers` for the workers, its `ChunkSummary` for the launcher."""
    numbers = quantiles.chunk_numbers(values)
    _write_pickle(stored[0], numbers)
    _write_pickle(stored[1], quantiles.chunk_summary(numbers))


class StoredCounter:
    """`quantiles.Counter` over the chunks `store_numbers` stored: the launcher merges their summaries (read
    once, `read` reading a few ahead) for the statistics and the first round; the later rounds are one
    pipeline (`run`) counting on the workers.

    Args:
      chunks: () -> the stored chunks, read when the counting starts (the encode pass stores them first).
      work: the work directory, where the pipeline leaves the finished selection for the launcher.
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

    def select(self, selection: quantiles.Selection) -> quantiles.Selection:
        if selection.rounds == 0:
            selection = selection.descend(quantiles.first_round(self._summaries()[2], selection.groups()))
        if selection.done or not len(selection.feature):
            return dataclasses.replace(selection, rounds=quantiles.ROUNDS)
        result = storage.join(self._work, SELECTIONS, f"{uuid.uuid4().hex}.pkl")
        numbers = [uri for uri, _ in self._chunks()]
        self._run(functools.partial(_rounds_pipeline, numbers=numbers, start=selection, result=result), PURPOSE)
        return pickle.loads(storage.read_bytes(result))  # the work directory is deleted with the run

    def _summaries(self) -> Tuple[List[StoredChunk], Dict[int, Tuple[int, NumericStats]], Dict]:
        """(the chunks, their merged `summaries`, their `first_counts`), merged once per set of stored chunks."""
        chunks = list(self._chunks())
        if self._merged is None or self._merged[0] != chunks:
            parts = list(self._read(summary for _, summary in chunks))
            self._merged = chunks, quantiles.summaries(parts), quantiles.first_counts(parts)
        return self._merged


def _rounds_pipeline(pipeline: Any, numbers: List[str], start: quantiles.Selection, result: str) -> None:
    """numbers references --Reshuffle--> per round left: each chunk's sparse counts under the round's groups
    --CombineGlobally(sum)--> the next `Selection` (a side input of the next round) --> the last one at `result`."""
    chunks = pipeline | "Chunks" >> beam.Create(numbers) | "SpreadChunks" >> beam.Reshuffle()
    state = pipeline | "Start" >> beam.Create([start])
    for n in range(start.rounds, quantiles.ROUNDS):
        counts = (
            chunks
            | f"Count{n}" >> beam.Map(_chunk_counts, beam.pvalue.AsSingleton(state))
            | f"Sum{n}" >> beam.CombineGlobally(_SumCounts())
        )
        state = counts | f"Descend{n}" >> beam.Map(_descended, beam.pvalue.AsSingleton(state))
    _ = state | "Write" >> beam.Map(_store, result)


def _chunk_counts(uri: str, selection: quantiles.Selection) -> Tuple[int, np.ndarray, np.ndarray]:
    """(the round's counts' length, a stored chunk's sparse counts under `selection`'s groups)."""
    groups = selection.groups()
    slots, counts = quantiles.chunk_counts(pickle.loads(storage.read_bytes(uri)), groups, selection.shift)
    return len(groups) * quantiles.BINS, slots, counts


def _descended(counts: np.ndarray, selection: quantiles.Selection) -> quantiles.Selection:
    return selection.descend(counts)


def _store(selection: quantiles.Selection, uri: str) -> None:
    _write_pickle(uri, selection)


def _grown(accumulator: np.ndarray, size: int) -> np.ndarray:
    if len(accumulator) >= size:
        return accumulator
    grown = np.zeros(size, np.int64)
    grown[: len(accumulator)] = accumulator
    return grown


def _write_pickle(uri: str, value: Any) -> None:
    storage.write_bytes(uri, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


if beam is not None:

    class _SumCounts(beam.CombineFn):
        """Sums the chunks' sparse counts (length, slots, counts) into one int64 [length] array: exact, in any
        order and grouping. The length (the round's groups x 256) comes with each part: the groups are known
        only once the previous round is done."""

        def create_accumulator(self) -> np.ndarray:
            return np.zeros(0, np.int64)

        def add_input(self, accumulator: np.ndarray, part: Tuple[int, np.ndarray, np.ndarray]) -> np.ndarray:
            size, slots, counts = part
            accumulator = _grown(accumulator, size)
            accumulator[slots] += counts  # each slot once per part
            return accumulator

        def merge_accumulators(self, accumulators: Iterable[np.ndarray]) -> np.ndarray:
            accumulators = list(accumulators)
            total = np.zeros(max((len(a) for a in accumulators), default=0), np.int64)
            for accumulator in accumulators:
                total[: len(accumulator)] += accumulator
            return total

        def extract_output(self, accumulator: np.ndarray) -> np.ndarray:
            return accumulator
