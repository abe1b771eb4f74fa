"""Preparation's two passes as Apache Beam pipelines (`PrepareConfig(engine="beam")`): Beam's local runner in
tests and local runs, Dataflow at scale. Runs on the Beam workers' CPUs; nothing here touches a TPU.

Only the per-chunk work moves to Beam, through the same functions the in-process engine calls
(`profile.profile_chunk`, `encode.encode_chunk`); `prepare.py` still decides the plan between the passes and
merges the chunks' results in input order with the same writers. So the output is byte-identical to the
in-process output: same chunks (each file is cut by `read.file_chunks` from its start, with the same
`chunk_bytes`), same per-chunk results, merged in the same order.

Each pass is one pipeline:

    input files --Reshuffle--> read a file into chunks --Reshuffle--> profile (or encode) a chunk
                                 (one worker per file:                 (any worker; the result is
                                  cutting is sequential)                written to the work directory)

The launcher then reads the chunks' results back in input order and merges them (`Passes`). Files are read in
parallel with each other, chunks are profiled and encoded in parallel; what stays sequential is cutting one
file into chunks, and, on the launcher, merging the per-chunk results and writing the shards (docs/scale.md).

Errors keep their order: a `DataError` in a worker (a malformed record, bytes that are not UTF-8) is stored as
that chunk's result and raised by the launcher when the merge reaches it, so the first error in input order
is the one reported, with the in-process message.
"""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import shutil
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from estimator_lib import storage
from estimator_lib.config import PrepareConfig
from estimator_lib.config.beam import BeamConfig
from estimator_lib.data.common import DataError
from estimator_lib.data.encode import ChunkResult, EncodePlan, encode_chunk
from estimator_lib.data.encode import init_worker as init_encoder
from estimator_lib.data.prepare import ChunkFacts, Passes, changed_message, task_for
from estimator_lib.data.profile import Profile, ProfilePlan, profile_chunk
from estimator_lib.data.profile import init_worker as init_profiler
from estimator_lib.data.read import CSV, Chunk, FileScan, InputFile, file_chunks

# Chunk results the launcher reads ahead of the merge (each about chunk_bytes of encoded rows).
_READ_AHEAD = 16

try:  # the Beam engine needs the optional extra; the classes below are defined only with it
    import apache_beam as beam
except ImportError:  # pragma: no cover - exercised only without the extra
    beam = None


def require_beam() -> None:
    if beam is None:
        raise ImportError(
            "engine='beam' needs Apache Beam: pip install 'tpu-estimator-pipelines[beam]' (or use engine='inprocess')"
        )


# -- running a pipeline ---------------------------------------------------------------------------------------
def run_pipeline(build: Callable[[Any], None], config: BeamConfig, purpose: str) -> None:
    """Builds a pipeline with `build(pipeline)` and runs it to the end on `config`'s runner.

    The DirectRunner is Beam's FnApiRunner, which the DirectRunner itself picks for batch pipelines once Prism
    (a binary it would download at run time) is unavailable; naming it here skips that download attempt.
    """
    require_beam()
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(config.pipeline_args(job_name(purpose)))
    if config.is_local:
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        runner: Any = FnApiRunner()
    else:
        runner = config.runner
    pipeline = beam.Pipeline(runner=runner, options=options)
    build(pipeline)
    result = pipeline.run()
    state = result.wait_until_finish()
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
@contextlib.contextmanager
def beam_passes(config: BeamConfig) -> Iterator[Passes]:
    """Preparation's `Passes` on Beam, with a work directory for this run."""
    require_beam()
    with work_directory(config, "prepare") as work:
        yield Passes(profile=_Profile(config, work), encode=_Encode(config, work))


class _Profile:
    """Pass 1: every file cut into chunks (one worker per file), every chunk profiled (any worker)."""

    def __init__(self, config: BeamConfig, work: str):
        self._config, self._work = config, work

    def __call__(
        self,
        inputs: List[InputFile],
        config: PrepareConfig,
        plan: ProfilePlan,
        header_check: Callable[[Chunk], None],
        scans: List[FileScan],
    ) -> Iterator[Tuple[int, Profile]]:
        check_headers(inputs, config.chunk_bytes, header_check)
        files = [(i, item, None) for i, item in enumerate(inputs)]
        reader = _ReadChunks(config.chunk_bytes, self._work, "profile")
        work = _ChunkWork(profile_chunk, init_profiler, plan, self._work, "profile")
        run_pipeline(lambda p: _chunk_pipeline(p, files, reader, work), self._config, "prepare-profile")
        for file_index, part in _merged(self._work, "profile", len(inputs), scans):
            yield file_index, part


class _Encode:
    """Pass 2: the same chunks again, each with its pass-1 facts, encoded (any worker)."""

    def __init__(self, config: BeamConfig, work: str):
        self._config, self._work = config, work

    def __call__(
        self,
        inputs: List[InputFile],
        config: PrepareConfig,
        plan: EncodePlan,
        facts: Iterator[ChunkFacts],
        scans: List[FileScan],
    ) -> Iterator[ChunkResult]:
        by_file: Dict[int, List[ChunkFacts]] = collections.defaultdict(list)
        for fact in facts:
            by_file[fact.file_index].append(fact)
        for file_index, file_facts in by_file.items():  # each file's reader loads its own
            write_pickle(file_result_uri(self._work, "facts", file_index), file_facts)
        files = [(i, item, scan.sha256) for i, (item, scan) in enumerate(zip(inputs, scans))]
        reader = _ReadChunks(config.chunk_bytes, self._work, "encode", with_facts=True)
        work = _ChunkWork(encode_chunk, init_encoder, plan, self._work, "encode")
        run_pipeline(lambda p: _chunk_pipeline(p, files, reader, work), self._config, "prepare-encode")
        for _, part in _merged(self._work, "encode", len(inputs), []):
            yield part


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


def _chunk_pipeline(pipeline: Any, files: List[Tuple[int, InputFile, Optional[str]]], reader: Any, work: Any) -> None:
    _ = (
        pipeline
        | "Files" >> beam.Create(files)
        | "SpreadFiles" >> beam.Reshuffle()
        | "Chunks" >> beam.ParDo(reader)
        | "SpreadChunks" >> beam.Reshuffle()
        | "Work" >> beam.ParDo(work)
    )


def _merged(work: str, stage: str, num_files: int, scans: List[FileScan]) -> Iterator[Tuple[int, Any]]:
    """(file index, result) of every chunk in input order; a stored `DataError` is raised where it occurred.
    Appends each file's `FileScan` to `scans`."""
    for file_index in range(num_files):
        chunks, scan, error = next(read_pickles([file_result_uri(work, stage, file_index)]))
        scans.append(scan)
        uris = (chunk_result_uri(work, stage, file_index, c) for c in range(chunks))
        for result in read_pickles(uris):
            if isinstance(result, DataError):
                raise result
            yield file_index, result
        if error is not None:
            raise error


if beam is not None:

    class _ReadChunks(beam.DoFn):
        """(file index, file, pass-1 sha256) -> ((file index, chunk number), chunk or pass-2 task); records per
        file how many chunks it gave, its `FileScan`, and the `DataError` that stopped it, if any."""

        def __init__(self, chunk_bytes: int, work: str, stage: str, with_facts: bool = False):
            self._chunk_bytes, self._work, self._stage, self._with_facts = chunk_bytes, work, stage, with_facts

        def process(self, element: Tuple[int, InputFile, Optional[str]]) -> Iterator[Tuple[Tuple[int, int], Any]]:
            file_index, item, expected_sha256 = element
            facts = self._facts(file_index) if self._with_facts else None
            scan, count, error = FileScan(), 0, None
            try:
                for chunk in file_chunks(file_index, item, self._chunk_bytes, scan):
                    if facts is None:
                        task: Any = chunk
                    else:
                        task = task_for(chunk, facts[count] if count < len(facts) else None)
                    yield (file_index, count), task
                    count += 1
                if expected_sha256 is not None and scan.sha256 != expected_sha256:
                    raise DataError(changed_message(item.name))
            except DataError as e:
                error = e
            write_pickle(file_result_uri(self._work, self._stage, file_index), (count, scan, error))

        def _facts(self, file_index: int) -> List[ChunkFacts]:
            uri = file_result_uri(self._work, "facts", file_index)
            return next(read_pickles([uri])) if storage.exists(uri) else []

    class _ChunkWork(beam.DoFn):
        """((file index, chunk number), task) -> `fn(task)` (or the `DataError` it raised), written to the work
        directory. `init(plan)` runs once per DoFn instance, as `init_worker` does in a worker process."""

        def __init__(self, fn: Callable[[Any], Any], init: Callable[[Any], None], plan: Any, work: str, stage: str):
            self._fn, self._init, self._plan, self._work, self._stage = fn, init, plan, work, stage

        def setup(self) -> None:
            self._init(self._plan)

        def process(self, element: Tuple[Tuple[int, int], Any]) -> None:
            (file_index, chunk), task = element
            try:
                result = self._fn(task)
            except DataError as e:
                result = e
            write_pickle(chunk_result_uri(self._work, self._stage, file_index, chunk), result)
