"""profile.json's exact percentiles counted on the Beam workers (`StoredCounter`, a `quantiles.Counter`): the
launcher never reads a chunk's training values. Host CPU only.

The encode pass's worker stores each chunk's training values twice (`store_numbers`): its `ChunkNumbers` (the
keys, about 4 bytes a value) and its `ChunkSummary` (statistics and first-round counts, features x 256 at most).
The launcher merges the summaries (their number grows with the chunks, not the rows) for the statistics and the
first round; the three later rounds are one small pipeline, each round's selection a side input of the next:

    batches of numbers references --Reshuffle--> per round: a batch's counts under the round's groups, stored
    (any worker) --GroupByKey--> summed per group, stored --ToList--> summed by one worker, int64 [groups x 256]
    --> the next round's `Selection`; the last one written to the work directory

Counts are sums of int64 (exact, order-independent), so the percentiles are `np.percentile`'s bit for bit, as
the in-process engine's, whichever worker counted which chunk.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import posixpath
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
BATCH_CHUNKS = 32  # chunks counted by one task (one stored count file per batch)
SUM_GROUPS = 32  # batch counts summed by as many tasks before the one that descends
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
            found: Dict[int, Tuple[int, NumericStats]] = {}
            first: Dict[int, np.ndarray] = {}
            for part in self._read(summary for _, summary in chunks):  # one held at a time, not all
                found = quantiles.summaries([part], found)
                first = quantiles.first_counts([part], first)
            self._merged = chunks, found, first
        return self._merged


def _rounds_pipeline(pipeline: Any, numbers: List[str], start: quantiles.Selection, result: str) -> None:
    """Batches of numbers references --Reshuffle--> per round left: a batch's counts under the round's groups,
    summed and stored (any worker) --GroupByKey(batch % SUM_GROUPS)--> each group's sum stored (one worker per
    group) --ToList--> summed by one worker into the next `Selection` (a side input of the next round) --> the
    last one at `result`. Only references and selections cross the runner (on the DirectRunner, the launcher):
    never a count array."""
    batches = [numbers[i : i + BATCH_CHUNKS] for i in range(0, len(numbers), BATCH_CHUNKS)]
    chunks = pipeline | "Batches" >> beam.Create(list(enumerate(batches))) | "SpreadBatches" >> beam.Reshuffle()
    state = pipeline | "Start" >> beam.Create([start])
    counts_dir = storage.join(posixpath.dirname(result), f"counts-{uuid.uuid4().hex}")
    for n in range(start.rounds, quantiles.ROUNDS):
        directory, selection = storage.join(counts_dir, str(n)), beam.pvalue.AsSingleton(state)
        state = (
            chunks
            | f"Count{n}" >> beam.Map(_count_batch, selection, directory)
            | f"Group{n}" >> beam.GroupByKey()
            | f"Sum{n}" >> beam.Map(_sum_group, selection, directory)
            | f"Gather{n}" >> beam.combiners.ToList()
            | f"Descend{n}" >> beam.Map(_summed_and_descended, selection)
        )
    _ = state | "Write" >> beam.Map(_store, result)


def _count_batch(batch: Tuple[int, List[str]], selection: quantiles.Selection, directory: str) -> Tuple[int, str]:
    """A batch's chunks counted under `selection`'s groups, stored sparse: (its sum group, where it is)."""
    index, uris = batch
    groups = selection.groups()
    total = np.zeros(len(groups) * quantiles.BINS, np.int64)
    for uri in uris:
        chunk = pickle.loads(storage.read_bytes(uri))
        slots, counts = quantiles.chunk_counts(chunk, groups, selection.shift)
        total[slots] += counts  # each slot once per chunk
    return index % SUM_GROUPS, _store_counts(storage.join(directory, f"batch-{index:09d}.pkl"), total)


def _sum_group(group: Tuple[int, Iterable[str]], selection: quantiles.Selection, directory: str) -> str:
    """A sum group's stored batch counts summed and stored sparse; where it is."""
    key, parts = group
    return _store_counts(storage.join(directory, f"group-{key:05d}.pkl"), _summed(parts, selection))


def _summed(parts: Iterable[str], selection: quantiles.Selection) -> np.ndarray:
    """The stored sparse counts `parts`, summed one at a time (int64 sums: exact in any order)."""
    total = np.zeros(len(selection.groups()) * quantiles.BINS, np.int64)
    for uri in parts:
        slots, counts = pickle.loads(storage.read_bytes(uri))
        total[slots] += counts  # each slot once per part
    return total


def _store_counts(uri: str, total: np.ndarray) -> str:
    slots = np.flatnonzero(total)
    _write_pickle(uri, (slots, total[slots]))
    return uri


def _summed_and_descended(parts: List[str], selection: quantiles.Selection) -> quantiles.Selection:
    """The next `Selection` from the sum groups' stored counts (`parts`)."""
    return selection.descend(_summed(parts, selection))


def _store(selection: quantiles.Selection, uri: str) -> None:
    _write_pickle(uri, selection)


def _write_pickle(uri: str, value: Any) -> None:
    storage.write_bytes(uri, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
