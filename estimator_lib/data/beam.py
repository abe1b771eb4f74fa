"""Preparation's two passes as Apache Beam pipelines (the "beam" engine: `prepare_on_beam`, or `beam_passes`
for `prepare.prepare` and `prepare.encode_for_scoring`): Beam's local runner in tests and local runs, Dataflow
at scale. Runs on the Beam workers' CPUs; nothing here touches a TPU.

The per-chunk work and, for `prepare`, the writing of the shards run on Beam workers, through the same
functions the in-process engine calls (`profile.profile_chunk`, `encode.encode_chunk`); `prepare.py` still
decides the plan between the passes and merges the chunks' statistics. The output is byte-identical to the
in-process output by construction: a row's shard comes from its key hash and a shard holds its rows in input
order (`output.shard_of`), and the statistics are exact and order-independent (`combine`), so neither depends
on which worker did what, or when (docs/scale.md).

Each pass is one pipeline; only references travel through Beam, the chunks, their pieces and the results go
through the work directory (`temp_location` on Dataflow):

    pass 1: input files --Reshuffle--> cut a file into chunks, store each --Reshuffle--> profile a chunk
                                       (one worker per file: cutting is      (any worker)
                                        sequential)
    keys:   chunk references --Reshuffle--> cut a chunk's keys (its stored profile) into hash buckets --GroupByKey
            (bucket)--> resolve a bucket: repeated keys, places (`data.keys`) --GroupByKey(chunk)--> a chunk's repeats
    pass 2: chunk references --Reshuffle--> encode a stored chunk with its pass-1 facts, store its records
            per (split, shard) and its training values (any worker) --GroupByKey(split, shard)--> write one
            shard (one worker each)

The launcher reads the chunks' results back in input order (statistics, counts and bad rows, never an encoded
row) and merges them (`Passes`); it holds no per-row data: it writes the places tables from the buckets' parts
and merges the chunks' small summaries of their training values for profile.json's exact percentiles, whose
selection rounds count the stored values on the workers (`data.beam_quantiles`).
Pass 2 encodes the chunks pass 1 stored, so the input is read once.
The shards stay where their workers wrote them (streamed, whole or absent): the launcher reads each one's
record (records, sha256, bytes) for the manifest, and the commit moves them into the output (a rename
locally, a server-side copy on Cloud Storage), so no shard byte passes through the launcher.
`encode_for_scoring`'s shards (consecutive rows) are still written by the launcher.

Errors keep their order: a `DataError` in a worker (a malformed record, bytes that are not UTF-8) is stored as
that chunk's result and raised by the launcher when the merge reaches it, so the first error in input order
is the one reported, with the in-process message.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import hashlib
import io
import logging
import os
import pickle
import shutil
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from estimator_lib import storage
from estimator_lib.config import PrepareConfig
from estimator_lib.config.beam import DASK_RUNNER, BeamConfig
from estimator_lib.data import beam_quantiles, keys, places
from estimator_lib.data.combine import merge_all
from estimator_lib.data.common import SPLITS, DataError
from estimator_lib.data.encode import ChunkResult, ChunkTask, EncodePlan, encode_chunk
from estimator_lib.data.encode import init_worker as init_encoder
from estimator_lib.data.output import shard_name, shard_of
from estimator_lib.data.prepare import ChunkFacts, Passes, PrepareResult, prepare
from estimator_lib.data.profile import Profile, ProfilePlan, profile_chunk
from estimator_lib.data.profile import init_worker as init_profiler
from estimator_lib.data.read import CSV, Chunk, FileScan, InputFile, file_chunks
from estimator_lib.schema import Schema

# Chunk results the launcher reads ahead of the merge (each about chunk_bytes of encoded rows).
_READ_AHEAD = 16

try:  # the Beam engine needs the optional extra; the classes below are defined only with it
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
except ImportError:  # pragma: no cover - exercised only without the extra
    beam = None
try:  # Beam's Dask runner needs dask and distributed (in the beam extra)
    from apache_beam.runners.dask.dask_runner import DaskRunner
    from distributed import LocalCluster
except ImportError:  # pragma: no cover - exercised only without them
    DaskRunner = LocalCluster = None


def require_beam() -> None:
    if beam is None:
        raise ImportError(
            "engine='beam' needs Apache Beam: pip install 'tpu-estimator-pipelines[beam]' (or use engine='inprocess')"
        )


# -- running a pipeline ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ClusterRunner:
    """A Beam runner `BeamConfig` does not name, on a cluster of this machine's processes (tests, benchmarks):
    `make()` gives the runner, `args` its options. The work directory is then local, as for the DirectRunner."""

    make: Callable[[], Any]
    args: Tuple[str, ...] = ()


def dask_cluster(scheduler_address: str) -> ClusterRunner:
    """Beam's Dask runner on the `dask.distributed` scheduler at `scheduler_address` (a `LocalCluster`'s)."""
    if DaskRunner is None:
        raise ImportError("Beam's Dask runner needs dask and distributed: pip install 'tpu-estimator-pipelines[beam]'")
    return ClusterRunner(DaskRunner, (f"--dask_client_address={scheduler_address}",))


@contextlib.contextmanager
def local_dask_cluster(workers: int) -> Iterator[str]:
    """A `dask.distributed` cluster of `workers` processes (one thread each) on this machine; yields the
    scheduler's address and closes the cluster on exit. Its scheduler runs in this process (it holds task
    metadata, not elements); elements move between the workers without passing through this process."""
    if LocalCluster is None:
        raise ImportError(
            "beam.runner='DaskRunner' needs dask and distributed: pip install 'tpu-estimator-pipelines[beam]'"
        )
    cluster = LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


@contextlib.contextmanager
def _runner_cluster(config: BeamConfig, cluster: Optional[ClusterRunner]) -> Iterator[Optional[ClusterRunner]]:
    """`cluster` when given; for `runner="DaskRunner"`, the Dask runner on a local cluster of
    `config.local_workers` processes, started for the run; otherwise None (`config`'s own runner)."""
    if cluster is not None or config.runner != DASK_RUNNER:
        yield cluster
        return
    with local_dask_cluster(config.local_workers) as address:
        yield dask_cluster(address)


def run_pipeline(
    build: Callable[[Any], None], config: BeamConfig, purpose: str, cluster: Optional[ClusterRunner] = None
) -> None:
    """Builds a pipeline with `build(pipeline)` and runs it to the end on `config`'s runner (or `cluster`).

    The DirectRunner is Beam's FnApiRunner, which the DirectRunner itself picks for batch pipelines once Prism
    (a binary it would download at run time) is unavailable; naming it here skips that download attempt.
    """
    require_beam()
    options = PipelineOptions(config.pipeline_args(job_name(purpose)))
    if cluster is not None:
        runner: Any = cluster.make()
        options = PipelineOptions(list(cluster.args))
    elif config.is_local:
        runner = FnApiRunner()
    else:
        runner = config.runner
    pipeline = beam.Pipeline(runner=runner, options=options)
    build(pipeline)
    result = pipeline.run()
    try:
        state = result.wait_until_finish()
    finally:
        if getattr(result, "client", None) is not None:  # the Dask runner's client: closed before its cluster
            result.client.close()
    if state not in (None, "DONE"):
        raise RuntimeError(f"the Beam pipeline {purpose!r} ended in state {state} on {config.runner}")


def job_name(purpose: str) -> str:
    """A Dataflow job name: lower-case letters, digits and hyphens, unique per run."""
    return f"{purpose}-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def work_directory(config: BeamConfig, purpose: str) -> Iterator[str]:
    """Where a run's pipelines leave their results for the launcher; deleted afterwards. Local for the
    DirectRunner (under `temp_location` when set), under the gs:// `temp_location` for Dataflow."""
    if config.is_local:
        if config.temp_location:
            os.makedirs(config.temp_location, exist_ok=True)
        local = tempfile.mkdtemp(prefix=f"beam-{purpose}-", dir=config.temp_location)
        try:
            yield local
        finally:
            shutil.rmtree(local, ignore_errors=True)
        return
    remote = storage.join(config.temp_location or "", f"{purpose}-{uuid.uuid4().hex}")
    try:
        yield remote
    finally:
        storage.delete_tree(remote)


def write_pickle(uri: str, value: Any) -> None:
    storage.write_bytes(uri, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def read_pickles(uris: Iterable[str]) -> Iterator[Any]:
    """The unpickled files in order, a few read ahead on threads (storage reads release the GIL)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        pending: collections.deque = collections.deque()
        for uri in uris:
            pending.append(pool.submit(storage.read_bytes, uri))
            if len(pending) >= _READ_AHEAD:
                yield pickle.loads(pending.popleft().result())
        while pending:
            yield pickle.loads(pending.popleft().result())


def chunk_result_uri(work: str, stage: str, file_index: int, chunk: int) -> str:
    return storage.join(work, stage, f"{file_index:06d}-{chunk:09d}.pkl")


def file_result_uri(work: str, stage: str, file_index: int) -> str:
    return storage.join(work, stage + "-files", f"{file_index:06d}.pkl")


# -- the passes -----------------------------------------------------------------------------------------------
CHUNKS, CUTS, PROFILE, ENCODE, FACTS = "chunks", "cut", "profile", "encode", "facts.pkl"
KEYS = "keys"  # `_Keys`: keys/pieces/<bucket>/<chunk>.npy, keys/places/<split>-<bucket>.npy, keys/repeats/...
PIECES, SHARDS, SHARD_RECORDS = "pieces", "shards", "shard-records"


def prepare_on_beam(
    config: PrepareConfig,
    output_dir: str,
    beam_config: Optional[BeamConfig] = None,
    reference: Optional[Schema] = None,
    cluster: Optional[ClusterRunner] = None,
) -> PrepareResult:
    """`prepare.prepare` (continuing `reference`, as there) with its passes on Apache Beam (None: the
    DirectRunner on this machine; `cluster`: that runner, e.g. `dask_cluster(address)`); the same output."""
    with beam_passes(beam_config or BeamConfig(), cluster) as passes:
        return prepare(config, output_dir, reference=reference, passes=passes)


@contextlib.contextmanager
def beam_passes(config: BeamConfig, cluster: Optional[ClusterRunner] = None) -> Iterator[Passes]:
    """Preparation's `Passes` on Beam (on `cluster` when given; for `runner="DaskRunner"` on a local Dask cluster
    started for the run), with a work directory for this run."""
    require_beam()
    with work_directory(config, "prepare") as work, _runner_cluster(config, cluster) as cluster:
        encode = _Encode(config, work, cluster)
        yield Passes(
            profile=_Profile(config, work, cluster),
            encode=encode,
            keys=_Keys(config, work, cluster),
            shard_writers=encode.worker_shards,
            train_numbers=encode.stored_numbers(),
        )


class _Pass:
    """One pass as a Beam pipeline on `config`'s runner, exchanging results through the work directory."""

    def __init__(self, config: BeamConfig, work: str, cluster: Optional[ClusterRunner] = None):
        self._config, self._work, self._cluster = config, work, cluster


class _Profile(_Pass):
    """Pass 1: every file cut into chunks (one worker per file; each chunk stored in the work directory, so
    only references travel through Beam), every chunk profiled (any worker)."""

    def __call__(
        self,
        inputs: List[InputFile],
        config: PrepareConfig,
        plan: ProfilePlan,
        header_check: Callable[[Chunk], None],
        scans: List[FileScan],
    ) -> Iterator[Tuple[int, Profile]]:
        check_headers(inputs, config.chunk_bytes, header_check)
        cut = _CutFile(config.chunk_bytes, self._work)
        work = _ChunkWork(profile_chunk, init_profiler, plan, self._work, PROFILE)
        build = functools.partial(_chunk_pipeline, files=list(enumerate(inputs)), expand=cut, work=work)
        run_pipeline(build, self._config, "prepare-profile", self._cluster)
        for file_index in range(len(inputs)):
            count, scan, error = next(read_pickles([file_result_uri(self._work, CUTS, file_index)]))
            scans.append(scan)
            for part in _results(self._work, PROFILE, [(file_index, c) for c in range(count)]):
                yield file_index, part.without_rows()  # its rows' keys stay in its stored profile (`_Keys`)
            if error is not None:  # reading the file failed after `count` chunks
                raise error


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """prepare's shards as the workers write them, into `directory` in the work directory: never into staging,
    where a worker killed while writing could leave a temporary file that would be published."""

    splits: Tuple[str, ...]
    num_shards: int
    directory: str


class WorkerShards:
    """`ShardWriters`' interface for shards the encode pass's workers write (`_WriteShard`): the launcher never
    receives an encoded row (`write` refuses one) nor reads a shard's bytes. `close` reads each shard's record
    ({records, sha256, bytes}, as its writer stored it) and leaves the shard where it was written: `elsewhere`
    ({name in the output: where it is}) for the commit, `fingerprints` for the manifest. A shard without rows
    is an empty file in staging, as `ShardWriters` leaves it."""

    def __init__(self, plan: ShardPlan, staging: str, work: str):
        self._plan, self._staging, self._work = plan, staging, work
        self.names = {s: [shard_name(s, k, plan.num_shards) for k in range(plan.num_shards)] for s in plan.splits}
        self.records = {name: 0 for names in self.names.values() for name in names}
        self.elsewhere: Dict[str, str] = {}
        self.fingerprints: Dict[str, Dict[str, Any]] = {}
        for split in plan.splits:
            os.makedirs(os.path.join(staging, split), exist_ok=True)

    def write(self, split: str, framed: List[bytes], key_hashes: Any = None) -> None:
        raise AssertionError(
            f"the launcher received {len(framed)} encoded {split} rows; with worker-written shards it gets none"
        )

    def close(self) -> None:
        stored = set(storage.list_files(storage.join(self._work, SHARD_RECORDS)))
        written = [
            (name, uri)
            for split, names in self.names.items()
            for k, name in enumerate(names)
            if (uri := shard_record_uri(self._work, split, k)) in stored
        ]
        for (name, _), record in zip(written, read_pickles(uri for _, uri in written)):
            self.records[name] = record["records"]
            self.fingerprints[name] = {"sha256": record["sha256"], "bytes": record["bytes"]}
            self.elsewhere[name] = storage.join(self._plan.directory, name)
        for name in self.records.keys() - self.elsewhere.keys():  # no rows (or the pass failed): an empty shard
            open(os.path.join(self._staging, name), "wb").close()


def shard_record_uri(work: str, split: str, shard: int) -> str:
    """Where a written shard's record ({records, sha256, bytes}) waits for the launcher."""
    return storage.join(work, SHARD_RECORDS, f"{split}-{shard:05d}.pkl")


class _Encode(_Pass):
    """Pass 2: the chunks pass 1 stored, each with its pass-1 facts, encoded (any worker). The input is read
    once: an input file that changes during the run cannot mix two versions into the output.

    For `prepare` (once `worker_shards` was called) the workers also write the shards: each encoded chunk's
    records are stored per (split, shard), only references are grouped by shard, and one worker writes each
    shard from its chunks' pieces in input order; the launcher gets each chunk's result without its rows."""

    def __init__(self, config: BeamConfig, work: str, cluster: Optional[ClusterRunner] = None):
        super().__init__(config, work, cluster)
        self._shards: Optional[ShardPlan] = None
        self._numbered: List[Tuple[int, int]] = []

    def stored_numbers(self) -> beam_quantiles.StoredCounter:
        """`Passes.train_numbers`: a counter over the training values of each chunk of the last pass that wrote
        shards, as its workers stored them; it counts them on the workers (the launcher reads no chunk's values)."""
        return beam_quantiles.StoredCounter(self._numbered_chunks, self._work, self._run, read_pickles)

    def _run(self, build: Callable[[Any], None], purpose: str) -> None:
        run_pipeline(build, self._config, purpose, self._cluster)

    def _numbered_chunks(self) -> List[beam_quantiles.StoredChunk]:
        return [stored_numbers_uris(self._work, file_index, chunk) for file_index, chunk in self._numbered]

    def worker_shards(self, staging: str, splits: Sequence[str], num_shards: int) -> WorkerShards:
        """`Passes.shard_writers`: called by `prepare` before the pass runs."""
        self._shards = ShardPlan(tuple(splits), num_shards, storage.join(self._work, SHARDS))
        return WorkerShards(self._shards, staging, self._work)

    def __call__(
        self,
        inputs: List[InputFile],
        config: PrepareConfig,
        plan: EncodePlan,
        facts: Iterator[ChunkFacts],
        scans: List[FileScan],
    ) -> Iterator[ChunkResult]:
        table: Dict[Tuple[int, int], Tuple[int, int]] = {}
        counts = [0] * len(inputs)
        for index, fact in enumerate(facts):  # key hashes and repeats: the workers read them (`_Keys`)
            table[(fact.file_index, counts[fact.file_index])] = (fact.first_row, index)
            counts[fact.file_index] += 1
        write_pickle(storage.join(self._work, FACTS), table)
        files = list(enumerate(counts))
        shards, self._shards = self._shards, None  # for this run only: a later scoring pass writes no shards
        if shards is None:
            work = _EncodeChunk(encode_chunk, init_encoder, plan, self._work, ENCODE)
            build = functools.partial(_chunk_pipeline, files=files, expand=_ChunkRefs(), work=work)
        else:
            place = _EncodeAndPlace(encode_chunk, init_encoder, plan, self._work, ENCODE, shards)
            write = _WriteShard(shards, self._work)
            build = functools.partial(_shard_pipeline, files=files, place=place, write=write)
            self._numbered = list(table)
        run_pipeline(build, self._config, "prepare-encode", self._cluster)
        yield from _results(self._work, ENCODE, list(table))


class _Keys(_Pass):
    """Between the passes (`data.keys`, `Passes.keys`): each chunk's keys (from its stored profile) cut into
    buckets of key hashes (any worker), each bucket resolved (one worker per bucket), each chunk's repeat facts
    gathered (one worker per chunk with repeats), all into the work directory. The launcher holds no row's key:
    it writes the places tables from the buckets' parts one part at a time, and the encode pass's workers read
    their chunk's repeats."""

    def __call__(self, profile: Profile, chunk_rows: List[Tuple[int, int]], plan: keys.KeyPlan, staging: str) -> None:
        refs, first_row, counts = [], 0, collections.Counter()
        for index, (file_index, n) in enumerate(chunk_rows):
            refs.append((file_index, counts[file_index], index, first_row))
            counts[file_index] += 1
            first_row += n
        build = functools.partial(_keys_pipeline, refs=refs, plan=plan, work=self._work)
        run_pipeline(build, self._config, "prepare-keys", self._cluster)
        for split in plan.splits:
            parts = [_places_part_uri(self._work, split, b) for b in range(1 << plan.bits)]
            found = [uri for uri in parts if storage.exists(uri)]
            count = sum(_npy_rows(uri) for uri in found)
            path = os.path.join(staging, places.places_file(split))
            keys.write_places(path, (_read_npy(uri) for uri in found), count)
        return None


def _keys_pipeline(pipeline: Any, refs: List[Tuple[int, int, int, int]], plan: keys.KeyPlan, work: str) -> None:
    """chunk references --Reshuffle--> cut each chunk's keys into buckets --GroupByKey(bucket)--> resolve each
    bucket --GroupByKey(chunk)--> gather each chunk's repeats. Only references travel through Beam."""
    _ = (
        pipeline
        | "Chunks" >> beam.Create(refs)
        | "SpreadChunks" >> beam.Reshuffle()
        | "CutKeys" >> beam.ParDo(_CutKeys(plan, work))
        | "GroupByBucket" >> beam.GroupByKey()
        | "Resolve" >> beam.ParDo(_Resolve(plan, work))
        | "GroupByChunk" >> beam.GroupByKey()
        | "GatherRepeats" >> beam.ParDo(_GatherRepeats(work))
    )


def _piece_uri(work: str, bucket: int, chunk: int) -> str:
    return storage.join(work, KEYS, "pieces", f"{bucket:05d}", f"{chunk:09d}.npy")


def _places_part_uri(work: str, split: str, bucket: int) -> str:
    return storage.join(work, KEYS, "places", f"{split}-{bucket:05d}.npy")


def _repeats_uri(work: str, chunk: int, bucket: Optional[int] = None) -> str:
    name = f"{chunk:09d}.pkl" if bucket is None else f"{chunk:09d}-{bucket:05d}.pkl"
    return storage.join(work, KEYS, "repeats", name)


def read_repeats(work: str, chunk: int, key_column: bool) -> Tuple[Dict[int, Any], Dict[int, int]]:
    """A chunk's (duplicates, occurrences) as `_Keys` stored them (none stored: the chunk has no repeat)."""
    uri = _repeats_uri(work, chunk)
    found = next(read_pickles([uri])) if storage.exists(uri) else {}
    return keys.split_facts(found, key_column)


def _write_npy(uri: str, array: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    storage.write_bytes(uri, buffer.getvalue())


def _read_npy(uri: str) -> np.ndarray:
    return np.load(io.BytesIO(storage.read_bytes(uri)), allow_pickle=False)


def _npy_rows(uri: str) -> int:
    """The entries of a stored one-dimensional array, from its header."""
    with storage.open_read(uri) as f:
        np.lib.format.read_magic(f)
        shape, _, _ = np.lib.format.read_array_header_1_0(f)
    return shape[0]


def check_headers(inputs: Sequence[InputFile], chunk_bytes: int, header_check: Callable[[Chunk], None]) -> None:
    """Runs `header_check` on each CSV file's first chunk, in file order, before any row is processed (as the
    in-process pass does). A file whose first block cannot be read is left to the pass, which reports it."""
    for index, item in enumerate(inputs):
        if item.fmt != CSV:
            continue
        chunks = file_chunks(index, item, chunk_bytes, FileScan())
        try:
            first = next(chunks, None)
        except DataError:
            continue
        finally:
            chunks.close()
        if first is not None:
            header_check(first)


def _chunk_pipeline(pipeline: Any, files: List[Tuple[int, Any]], expand: Any, work: Any) -> None:
    """files --Reshuffle--> chunk references of each file --Reshuffle--> the work on each chunk."""
    _ = (
        pipeline
        | "Files" >> beam.Create(files)
        | "SpreadFiles" >> beam.Reshuffle()
        | "Chunks" >> beam.ParDo(expand)
        | "SpreadChunks" >> beam.Reshuffle()
        | "Work" >> beam.ParDo(work)
    )


def _shard_pipeline(pipeline: Any, files: List[Tuple[int, int]], place: Any, write: Any) -> None:
    """chunk references --Reshuffle--> encode each chunk, store its pieces --GroupByKey(split, shard)--> write
    each shard (one worker per shard)."""
    _ = (
        pipeline
        | "Files" >> beam.Create(files)
        | "Chunks" >> beam.ParDo(_ChunkRefs())
        | "SpreadChunks" >> beam.Reshuffle()
        | "EncodeAndPlace" >> beam.ParDo(place)
        | "GroupByShard" >> beam.GroupByKey()
        | "WriteShard" >> beam.ParDo(write)
    )


def numbers_uri(work: str, file_index: int, chunk: int) -> str:
    """Where an encoded chunk's training values (`ChunkResult.train_numbers`) wait for prepare's profile."""
    return chunk_result_uri(work, "numbers", file_index, chunk)


def stored_numbers_uris(work: str, file_index: int, chunk: int) -> beam_quantiles.StoredChunk:
    """Where an encoded chunk's training values wait for prepare's profile, as `beam_quantiles.store_numbers`
    stores them: (its `ChunkNumbers`, read by the workers; its `ChunkSummary`, read by the launcher)."""
    return numbers_uri(work, file_index, chunk), chunk_result_uri(work, "numbers-summary", file_index, chunk)


def piece_uri(work: str, split: str, shard: int, file_index: int, chunk: int) -> str:
    """Where a chunk's framed records for one shard wait for the shard's writer."""
    return storage.join(work, PIECES, f"{split}-{shard:05d}", f"{file_index:06d}-{chunk:09d}.bin")


def _pieces(result: ChunkResult, num_shards: int) -> Iterator[Tuple[str, int, List[bytes]]]:
    """(split, shard, framed records in input order) of every non-empty piece of an encoded chunk."""
    for s, split in enumerate(SPLITS):
        shards = shard_of(result.hashes[s], num_shards)
        for k in np.unique(shards).tolist():
            yield split, k, [result.examples[s][i] for i in np.flatnonzero(shards == k).tolist()]


def _results(work: str, stage: str, refs: List[Tuple[int, int]]) -> Iterator[Any]:
    """The stored results of the chunks `refs`, in that order; a stored `DataError` is raised where it is."""
    for result in read_pickles(chunk_result_uri(work, stage, f, c) for f, c in refs):
        if isinstance(result, DataError):
            raise result
        yield result


if beam is not None:

    class _CutFile(beam.DoFn):
        """(file index, file) -> (file index, chunk number) per chunk, each chunk stored in the work directory;
        records per file how many chunks it gave, its `FileScan`, and the `DataError` that stopped it."""

        def __init__(self, chunk_bytes: int, work: str):
            self._chunk_bytes, self._work = chunk_bytes, work

        def process(self, element: Tuple[int, InputFile]) -> Iterator[Tuple[int, int]]:
            file_index, item = element
            scan, count, error = FileScan(), 0, None
            try:
                for chunk in file_chunks(file_index, item, self._chunk_bytes, scan):
                    write_pickle(chunk_result_uri(self._work, CHUNKS, file_index, count), chunk)
                    yield file_index, count
                    count += 1
            except DataError as e:
                error = e
            write_pickle(file_result_uri(self._work, CUTS, file_index), (count, scan, error))

    class _ChunkRefs(beam.DoFn):
        """(file index, chunks) -> (file index, chunk number) per chunk."""

        def process(self, element: Tuple[int, int]) -> Iterator[Tuple[int, int]]:
            file_index, count = element
            for chunk in range(count):
                yield file_index, chunk

    class MergeCombineFn(beam.CombineFn):
        """A `data.combine` accumulator as Beam's CombineFn: each input is already a partial accumulator (a
        worker's `NumericStats.of(values)`, say), merged with `merge`; `empty()` is the merge's identity. The
        merges are exact and commutative, so the result does not depend on how Beam groups or orders them."""

        def __init__(self, empty: Callable[[], Any]):
            self._empty = empty

        def create_accumulator(self) -> Any:
            return self._empty()

        def add_input(self, accumulator: Any, part: Any) -> Any:
            return accumulator.merge(part)

        def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
            return merge_all(accumulators)

        def extract_output(self, accumulator: Any) -> Any:
            return accumulator

    class _ChunkWork(beam.DoFn):
        """(file index, chunk number) -> `fn(task)` (or the `DataError` it raised), written to the work
        directory. `init(plan)` runs once per DoFn instance, as `init_worker` does in a worker process."""

        def __init__(self, fn: Callable[[Any], Any], init: Callable[[Any], None], plan: Any, work: str, stage: str):
            self._fn, self._init, self._plan, self._work, self._stage = fn, init, plan, work, stage

        def setup(self) -> None:
            self._init(self._plan)

        def process(self, element: Tuple[int, int]) -> None:
            file_index, chunk = element
            try:
                result = self._fn(self._task(file_index, chunk))
            except DataError as e:
                result = e
            write_pickle(chunk_result_uri(self._work, self._stage, file_index, chunk), result)

        def _task(self, file_index: int, chunk: int) -> Any:
            return next(read_pickles([chunk_result_uri(self._work, CHUNKS, file_index, chunk)]))

    class _EncodeChunk(_ChunkWork):
        """Pass 2's work: a stored chunk, its pass-1 key hashes (its stored profile) and facts -> `ChunkTask`."""

        def setup(self) -> None:
            super().setup()
            self._facts = next(read_pickles([storage.join(self._work, FACTS)]))

        def _task(self, file_index: int, chunk: int) -> ChunkTask:
            text, profile = read_pickles(
                [
                    chunk_result_uri(self._work, CHUNKS, file_index, chunk),
                    chunk_result_uri(self._work, PROFILE, file_index, chunk),
                ]
            )
            first_row, index = self._facts[(file_index, chunk)]
            duplicates, occurrences = read_repeats(self._work, index, self._plan.key_column is not None)
            return ChunkTask(text, first_row, duplicates, occurrences, profile.key_hashes[0])

    class _EncodeAndPlace(_EncodeChunk):
        """Pass 2 for worker-written shards: (file index, chunk) -> its records stored per (split, shard), and
        ((split, shard), (file index, chunk, records)) per piece; the chunk's result is stored without its
        rows (or the `DataError`, and no piece)."""

        def __init__(self, fn, init, plan, work: str, stage: str, shards: ShardPlan):
            super().__init__(fn, init, plan, work, stage)
            self._shards = shards

        def process(self, element: Tuple[int, int]) -> Iterator[Tuple[Tuple[str, int], Tuple[int, int, int]]]:
            file_index, chunk = element
            try:
                result = self._fn(self._task(file_index, chunk))
            except DataError as e:
                write_pickle(chunk_result_uri(self._work, self._stage, file_index, chunk), e)
                return
            for split, shard, framed in _pieces(result, self._shards.num_shards):
                storage.write_bytes(piece_uri(self._work, split, shard, file_index, chunk), b"".join(framed))
                yield (split, shard), (file_index, chunk, len(framed))
            beam_quantiles.store_numbers(stored_numbers_uris(self._work, file_index, chunk), result.train_numbers)
            stored = dataclasses.replace(result.without_rows(), train_numbers={})
            write_pickle(chunk_result_uri(self._work, self._stage, file_index, chunk), stored)

    class _WriteShard(beam.DoFn):
        """((split, shard), pieces) -> the shard's file: its pieces in input order (file, then chunk), streamed
        one piece at a time into a file published whole or not at all (`storage.open_write`); then its record
        {records, sha256, bytes}, computed while writing, for the launcher's manifest."""

        def __init__(self, shards: ShardPlan, work: str):
            self._shards, self._work = shards, work

        def process(self, element: Tuple[Tuple[str, int], Iterable[Tuple[int, int, int]]]) -> None:
            (split, shard), pieces = element
            ordered = sorted(pieces)
            name = shard_name(split, shard, self._shards.num_shards)
            digest, size = hashlib.sha256(), 0
            with storage.open_write(storage.join(self._shards.directory, name)) as f:
                for file_index, chunk, _ in ordered:
                    piece = storage.read_bytes(piece_uri(self._work, split, shard, file_index, chunk))
                    digest.update(piece)
                    f.write(piece)
                    size += len(piece)
            record = {"records": sum(n for _, _, n in ordered), "sha256": digest.hexdigest(), "bytes": size}
            write_pickle(shard_record_uri(self._work, split, shard), record)

    class _CutKeys(beam.DoFn):
        """(file index, chunk number, chunk index, first row) -> the chunk's keys (its stored profile's) stored
        per bucket, and (bucket, chunk index) per bucket it has keys in."""

        def __init__(self, plan: keys.KeyPlan, work: str):
            self._plan, self._work = plan, work

        def process(self, element: Tuple[int, int, int, int]) -> Iterator[Tuple[int, int]]:
            file_index, chunk, index, first_row = element
            profile = next(read_pickles([chunk_result_uri(self._work, PROFILE, file_index, chunk)]))
            if isinstance(profile, DataError):  # the launcher raised it in pass 1 already
                return
            arrays = profile.key_hashes[0], profile.valid[0], profile.lines[0]
            entries = keys.chunk_entries(*arrays, file_index, index, first_row)
            for bucket, part in keys.buckets(entries, self._plan.bits):
                _write_npy(_piece_uri(self._work, bucket, index), part)
                yield bucket, index

    class _Resolve(beam.DoFn):
        """(bucket, chunk indices) -> the bucket's places parts per split and its repeats per chunk, stored;
        (chunk index, bucket) per chunk with repeats here."""

        def __init__(self, plan: keys.KeyPlan, work: str):
            self._plan, self._work = plan, work

        def process(self, element: Tuple[int, Iterable[int]]) -> Iterator[Tuple[int, int]]:
            bucket, chunks = element
            parts = [_read_npy(_piece_uri(self._work, bucket, c)) for c in sorted(chunks)]
            resolved = keys.resolve_all(parts, self._plan)
            for split, table in resolved.places.items():
                if len(table):
                    _write_npy(_places_part_uri(self._work, split, bucket), table)
            for chunk, facts in resolved.facts.items():
                write_pickle(_repeats_uri(self._work, chunk, bucket), facts)
                yield chunk, bucket

    class _GatherRepeats(beam.DoFn):
        """(chunk index, buckets) -> the chunk's repeats from its buckets, stored for the encode pass."""

        def __init__(self, work: str):
            self._work = work

        def process(self, element: Tuple[int, Iterable[int]]) -> None:
            chunk, buckets = element
            parts = list(read_pickles(_repeats_uri(self._work, chunk, b) for b in sorted(buckets)))
            write_pickle(_repeats_uri(self._work, chunk), keys.merge_facts(parts))
