"""The skew check's profile of the rows being scored, made on Apache Beam (`predict.beam`'s engine). Host CPUs.

    input files --Reshuffle--> one worker per file reads it in chunks (`distribution.record_chunks`): each chunk's
        numeric values stored as `quantiles` reads them (its keys for the workers, its summary for the launcher),
        the file's counts (records, missing values, each category's count) stored once
    the launcher merges the files' counts and the chunks' summaries; the percentiles' later selection rounds
        count the stored keys on the workers (`beam_quantiles.StoredCounter`, as preparation's profile)

The launcher holds the merged counts (one entry per feature and per category) and the chunks' references, never a
row's value. Counts and statistics are exact sums and the selection finds `np.percentile`'s values bit for bit,
so the profile is `distribution.profile_records`' (what the in-process engine computes), byte for byte.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Sequence, Tuple

from estimator_lib import storage
from estimator_lib.config.beam import BeamConfig
from estimator_lib.data import beam_quantiles, beam_runners, distribution, quantiles
from estimator_lib.data.beam import beam, read_pickles, require_beam, work_directory, write_pickle
from estimator_lib.predict.skew import SkewCheck, SkewReport
from estimator_lib.schema import Schema

PURPOSE = "batch-predict-skew"
FILES, CHUNKS = "skew-files", "skew-chunks"


def before_scoring(
    check: SkewCheck,
    files: Sequence[str],
    schema: Schema,
    rows: Optional[int],
    beam_config: Optional[BeamConfig] = None,
    compression: str = "",
) -> Optional[SkewReport]:
    """`SkewCheck.before_scoring` with the rows profiled on Beam (`profile_on_beam`; nothing is read with
    `predict.skew=off` or without a training profile).

    Raises:
      SkewError: with `predict.skew=block`, the rows are skewed (naming the worst features).
    """
    return check.judged(lambda: profile_on_beam(files, schema, rows, beam_config, compression))


def profile_on_beam(
    files: Sequence[str],
    schema: Schema,
    rows: Optional[int],
    beam_config: Optional[BeamConfig] = None,
    compression: str = "",
) -> Dict[str, Any]:
    """`distribution.profile_records` of the encoded records of `files` ("GZIP" or "" `compression`), computed on
    Beam's workers (`beam_config`; None: the DirectRunner on this machine).

    Raises:
      ValueError: `rows` (None: not checked) is not the number of records the files hold.
    """
    require_beam()
    config = beam_config or BeamConfig()
    files = list(files)
    with work_directory(config, "skew") as work, beam_runners.session(config) as run:
        build = functools.partial(_profile_pipeline, files=files, schema=schema, work=work, compression=compression)
        run(build, PURPOSE)
        counts, chunks = distribution.RecordCounts.empty(schema), []
        for index, (part, n) in enumerate(read_pickles(_file_uri(work, i) for i in range(len(files)))):
            counts = counts.merge(part)
            chunks += [_chunk_uris(work, index, k) for k in range(n)]
        counter = beam_quantiles.StoredCounter(lambda: chunks, work, run, read_pickles)
        return distribution.profile_counted(schema, counter, counts, rows)


def _profile_pipeline(pipeline: Any, files: List[str], schema: Schema, work: str, compression: str) -> None:
    _ = (
        pipeline
        | "Files" >> beam.Create(list(enumerate(files)))
        | "Spread" >> beam.Reshuffle()
        | "Profile" >> beam.Map(_profile_file, schema, work, compression)
    )


def _profile_file(element: Tuple[int, str], schema: Schema, work: str, compression: str) -> None:
    """One file's chunks stored for the selection, and its (counts, chunks) for the launcher."""
    index, path = element
    counts, n = distribution.RecordCounts.empty(schema), 0
    for chunk, part in distribution.record_chunks([path], schema, compression):
        numbers_uri, summary_uri = _chunk_uris(work, index, n)
        write_pickle(numbers_uri, chunk)
        write_pickle(summary_uri, quantiles.chunk_summary(chunk))
        counts, n = counts.merge(part), n + 1
    write_pickle(_file_uri(work, index), (counts, n))


def _file_uri(work: str, index: int) -> str:
    return storage.join(work, FILES, f"{index:06d}.pkl")


def _chunk_uris(work: str, index: int, chunk: int) -> beam_quantiles.StoredChunk:
    """Where a chunk's `ChunkNumbers` (the workers count them) and `ChunkSummary` (the launcher merges them) wait."""
    name = f"{index:06d}-{chunk:06d}"
    return storage.join(work, CHUNKS, f"{name}.numbers.pkl"), storage.join(work, CHUNKS, f"{name}.summary.pkl")
