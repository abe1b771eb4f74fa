"""Input preparation: CSV or JSON Lines (local or gs://) -> sharded `tf.train.Example` TFRecords, schema,
statistics, quarantine and a fingerprinted manifest. Runs on the host CPU, before any TPU work.

Two streaming passes over the input, each chunk by chunk on all cores (`parallel`):
  1. profile (`profile`): column types, label values, each row's key hash, hence its split;
  2. encode (`encode`): check each row against the decided schema, write good rows, set bad rows
     aside (or fail on the first), gather training statistics.
Between them `plan` decides the schema's shape and `keys` finds repeated keys and the rows' places (per bucket
of key hashes); after them `stats` fills in statistics and `quantiles` profile.json's percentiles.

Splits are stable: a row's split comes from a hash of its key (the key column, or its content), so preparing
a superset of the data keeps every old row in its old split. Identical inputs give bitwise identical outputs,
wherever they are stored and however many workers run.

`encode_for_scoring` runs the same two passes over new rows with the training schema (no split, label
optional, rows in input order) for batch prediction; its own pieces are in `score`.

Who runs each pass's per-chunk work is a `Passes`: worker processes on this host (`IN_PROCESS`, the default),
or Apache Beam pipelines (`estimator_lib.data.beam.beam_passes`, the "beam" engine). Everything else (the plan
between the passes, merging the chunks' statistics and bad rows, the schema and the manifest) is this module's,
whichever runs the passes; the shards are written here, or by the Beam workers (`Passes.shard_writers`: then
they stay where the workers wrote them until the commit moves them in, and their fingerprints come from their
writers). A
row's shard and every statistic are independent of processing order, so both engines give byte-identical outputs.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Protocol, Sequence, Tuple, Union

import numpy as np

from estimator_lib import fingerprints, storage
from estimator_lib.config import DEFAULT_MISSING_VALUES, PrepareConfig, require
from estimator_lib.data import keys, quantiles
from estimator_lib.data import score as scoring
from estimator_lib.data.common import SPLITS, TRAIN, VALID, DataError
from estimator_lib.data.distribution import PROFILE, profile_split, profile_summaries
from estimator_lib.data.encode import ChunkResult, ChunkTask, EncodePlan, encode_chunk
from estimator_lib.data.encode import init_worker as init_encoder
from estimator_lib.data.keys import KeyPlan
from estimator_lib.data.output import (
    MANIFEST,
    QUARANTINE,
    SCHEMA,
    UNLABELLED,
    ConsecutiveShards,
    JsonLinesWriter,
    ShardWriters,
    output_fingerprints,
    write_json,
)
from estimator_lib.data.parallel import ordered_map
from estimator_lib.data.plan import Decisions, decide_schema, encode_plan
from estimator_lib.data.profile import Profile, ProfilePlan, profile_chunk
from estimator_lib.data.profile import init_worker as init_profiler
from estimator_lib.data.read import CSV, Chunk, FileScan, InputFile, iter_chunks, resolve_inputs, with_help
from estimator_lib.data.score import ScoringData
from estimator_lib.data.stats import Totals, build_schema, cap_note, notes, summary, vocabulary_caps
from estimator_lib.progress import RowProgress
from estimator_lib.schema import Schema, read_schema

__all__ = [
    "DataError",
    "PrepareConfig",
    "PrepareResult",
    "ScoringData",
    "encode_for_scoring",
    "load_prepared",
    "prepare",
]

# 2: a row's shard comes from its key hash (`output.shard_of`), statistics are exact (`combine`); 1: rows went to
# shards round-robin in input order. Both read the same way (`part-*.tfrecord`).
FORMAT_VERSION = 2


@dataclasses.dataclass(frozen=True)
class PrepareResult:
    """A published preparation: where it is, its schema, rows per split, and its manifest."""

    output_dir: str
    schema: Schema
    counts: Dict[str, int]
    manifest: Dict[str, Any]

    def files(self, split: str) -> str:
        """Glob pattern of a split's TFRecord shards."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r} must be one of {SPLITS}")
        return storage.join(self.output_dir, split, "part-*.tfrecord")

    def profile(self) -> Optional[Dict[str, Any]]:
        """The training split's distribution (`estimator_lib.data.distribution`); None for a preparation made
        before profiles were recorded."""
        path = storage.join(self.output_dir, PROFILE)
        return json.loads(storage.read_text(path)) if storage.exists(path) else None


@dataclasses.dataclass(frozen=True)
class ChunkFacts:
    """What pass 2 needs to know of one chunk from pass 1 (see `ChunkTask`), without the chunk's text."""

    file_index: int
    first_row: int
    duplicates: Dict[int, Tuple[str, int]]
    occurrences: Dict[int, int]
    key_hashes: Optional[np.ndarray]  # uint64 [rows of the chunk]; None where the pass reads them itself (Beam)


class ProfilePass(Protocol):
    """Pass 1's per-chunk work: (file index, `Profile`) per chunk, in input (chunk) order. Appends one `FileScan`
    per input file to `scans`; `header_check` sees each CSV file's first chunk before its rows."""

    def __call__(
        self,
        inputs: List[InputFile],
        config: PrepareConfig,
        plan: ProfilePlan,
        header_check: Callable[[Chunk], None],
        scans: List[FileScan],
    ) -> Iterator[Tuple[int, Profile]]: ...


class EncodePass(Protocol):
    """Pass 2's per-chunk work: a `ChunkResult` per chunk, in input order, the same chunks as pass 1, each with
    its `ChunkFacts` (in-process, read again and checked against pass 1's `scans`: a file that changed fails)."""

    def __call__(
        self,
        inputs: List[InputFile],
        config: PrepareConfig,
        plan: EncodePlan,
        facts: Iterator[ChunkFacts],
        scans: List[FileScan],
    ) -> Iterator[ChunkResult]: ...


class KeysPass(Protocol):
    """Between the passes (`data.keys`): the repeated keys and the places of every chunk's rows (`chunk_rows`:
    (file index, rows) per chunk, in input order) by `plan`; writes the places tables into `staging`. Returns
    {chunk index: {row: repeat fact}} for the encode pass, or None when its workers read them themselves."""

    def __call__(
        self, profile: Profile, chunk_rows: List[Tuple[int, int]], plan: KeyPlan, staging: str
    ) -> Optional[Dict[int, Dict[int, Any]]]: ...


@dataclasses.dataclass(frozen=True)
class Passes:
    """Who runs the two passes' per-chunk work: worker processes on this host (`IN_PROCESS`), or Apache Beam
    (`estimator_lib.data.beam`). Both yield in input (chunk) order."""

    profile: ProfilePass
    encode: EncodePass
    keys: KeysPass
    # Who writes prepare's shards: None, this process (`ShardWriters`, fed the encoded rows); else a factory
    # (staging, splits, num_shards) -> writers with ShardWriters' interface, called before the encode pass, for
    # an encode pass whose workers write the shards themselves (`data.beam`).
    shard_writers: Optional[Callable[[str, List[str], int], Any]] = None
    # Who counts the chunks' training values (`ChunkResult.train_numbers`) for prepare's profile: None, this
    # process, from the results the encode pass yields; else a `quantiles.Counter` over them as the workers
    # stored them, counting where they are (`data.beam_quantiles`).
    train_numbers: Optional[quantiles.Counter] = None


def prepare(
    config: PrepareConfig, output_dir: str, reference: Optional[Schema] = None, passes: Optional[Passes] = None
) -> PrepareResult:
    """Prepares `config.data` into `output_dir` (local or gs://), published atomically.

    Args:
      config: what to prepare and how.
      output_dir: where the preparation is published.
      reference: the schema of the published model this run continues (warm start, comparison): its features,
        kinds, label classes and their order are kept, vocabularies only grow (known ids never move), and its
        normalisation is kept unless `config.refit_normalization` (see `plan.continued_decisions`,
        `stats.append_only`). Not with `config.schema_uri`.
      passes: who runs the passes' per-chunk work: None for worker processes on this host (`IN_PROCESS`);
        `estimator_lib.data.beam.beam_passes(...)` for Apache Beam. The output is the same.

    Raises:
      DataError: bad input (the message names file, line, column, value and what was expected).
      ConfigError: a setting is invalid or disagrees with the supplied schema.
    """
    require(
        reference is None or config.schema_uri is None,
        "schema_uri is set while the run continues a published model's schema; drop prepare.schema_uri, or start "
        "cold (--warm-start none --baseline none)",
    )
    inputs = resolve_inputs(config.data, config.input_format)
    supplied = _supplied_schema(config)
    elsewhere: Dict[str, str] = {}  # shards the workers wrote, where they are (`_prepare_into` fills it)
    schema, counts, manifest = storage.commit_staged(
        output_dir,
        lambda staging: _prepare_into(staging, inputs, supplied, config, passes or IN_PROCESS, reference, elsewhere),
        elsewhere,
    )
    return PrepareResult(output_dir, schema, counts, manifest)


def encode_for_scoring(
    data: Union[str, Sequence[str]],
    schema: Schema,
    output_dir: str,
    *,
    key_column: Optional[str] = None,
    input_format: str = "auto",
    bad_rows: str = "fail",
    max_bad_fraction: float = 0.01,
    missing_values: Sequence[str] = DEFAULT_MISSING_VALUES,
    num_shards: int = 1,
    num_workers: Optional[int] = None,
    chunk_bytes: int = 1 << 20,
    passes: Optional[Passes] = None,
) -> ScoringData:
    """Encodes new raw rows (CSV / JSON Lines, local or gs://, globs) for scoring with a model trained on
    `schema`, into `output_dir` (local or gs://), published atomically. Runs on the host CPU.

    Rows are read, checked and encoded exactly as `prepare` does (same readers, missing values, bad-row
    messages and wire encoder), with these differences:
      * no split: every row is kept in input order (file order, then row order); shard i of `num_shards`
        holds a consecutive range, so reading the shards in name order gives input order;
      * the schema is the training schema, used as it is (vocabularies, classes and statistics unchanged);
        an unknown category is encoded as its text and maps to the out-of-vocabulary id when parsed;
      * the label column is optional. A label that is present and valid (a known class, or a finite number
        for regression) is written; a missing or invalid one is left out of the Example and the row is
        still scored (the manifest counts the rows with a label, `rows.labelled`);
      * columns the schema does not know are allowed and listed in the manifest (`extra_columns`); a feature
        column absent from a CSV header, or from every JSON Lines row, fails the run, naming the columns.
    Keys: the `key_column` value, or the content-derived key `prepare` gives the same row (a hash of all its
    present values by column name plus its occurrence among identical rows); duplicate keys are bad rows.

    Args:
      data: paths, gs:// URIs or globs of CSV / JSON Lines files.
      schema: the training schema (prepare's schema.json).
      output_dir: where `part-SSSSS-of-NNNNN.tfrecord`, schema.json, manifest.json and quarantine.jsonl
        (only when rows were quarantined) are published.
      key_column: a column of unique row keys; None uses the schema's key column, or content keys.
      input_format, bad_rows, max_bad_fraction, missing_values, num_shards, num_workers, chunk_bytes: as in
        `PrepareConfig`.
      passes: who runs the passes, as for `prepare`.

    Returns:
      The published `ScoringData`: its `count` is the number of records (batch prediction's num_examples).

    Raises:
      DataError: bad input, as `prepare` reports it (file, line, column, value, expectation).
      ConfigError: an invalid setting.
    """
    # A PrepareConfig drives the shared passes and validates the settings; its split fractions go unused.
    config = PrepareConfig(
        data=data,
        label=schema.label.name,
        key_column=scoring.key_column(schema, key_column),
        input_format=input_format,
        bad_rows=bad_rows,
        max_bad_fraction=max_bad_fraction,
        missing_values=tuple(missing_values),
        num_shards=num_shards,
        num_workers=num_workers,
        chunk_bytes=chunk_bytes,
    )
    inputs = resolve_inputs(config.data, config.input_format)
    manifest = storage.commit_staged(
        output_dir, lambda staging: _score_into(staging, inputs, schema, config, passes or IN_PROCESS)
    )
    return ScoringData(output_dir, manifest["count"], manifest)


def load_prepared(output_dir: str) -> PrepareResult:
    """Reads a published preparation back (schema.json + manifest.json)."""
    if not storage.is_committed(output_dir):
        raise FileNotFoundError(
            f"{output_dir} holds no complete preparation (no {storage.COMMIT_MARKER} marker); run prepare() "
            "into it first, or check the path"
        )
    manifest = json.loads(storage.read_text(storage.join(output_dir, MANIFEST)))
    schema = read_schema(storage.join(output_dir, SCHEMA))
    return PrepareResult(output_dir, schema, dict(manifest["counts"]), manifest)


def _supplied_schema(config: PrepareConfig) -> Optional[Schema]:
    if config.schema_uri is None:
        return None
    schema = read_schema(config.schema_uri)
    require(
        schema.label.name == config.label,
        f"label={config.label!r} differs from the schema's label {schema.label.name!r} ({config.schema_uri}); "
        "use the same label column",
    )
    require(
        schema.key_column in (None, config.key_column),
        f"key_column={config.key_column!r} differs from the schema's key column {schema.key_column!r}; set "
        f"key_column={schema.key_column!r}",
    )
    return schema


# -- the two passes -----------------------------------------------------------------------------------------
def _prepare_into(
    staging: str,
    inputs: List[InputFile],
    supplied: Optional[Schema],
    config: PrepareConfig,
    passes: Passes,
    reference: Optional[Schema] = None,
    elsewhere: Optional[Dict[str, str]] = None,
) -> Tuple[Schema, Dict[str, int], Dict[str, Any]]:
    """Writes the preparation into `staging`; adds to `elsewhere` the shards stored outside it (written by the
    encode pass's workers: {name in the output: where it is}) for the commit to bring in."""
    profile, chunk_rows, file_starts, scans = _profile(inputs, config, _header_check(config), passes, "prepare")
    fractions = (config.eval_fraction, config.test_fraction, config.valid_fraction)
    key_plan = keys.prepare_plan([i.name for i in inputs], config.key_column is not None, fractions, profile.rows)
    repeats = passes.keys(profile, chunk_rows, key_plan, staging)
    decisions = decide_schema(profile, config, supplied, reference)
    plan = dataclasses.replace(encode_plan(decisions, config), train_numbers=True)  # for profile.json
    facts = chunk_facts(profile, chunk_rows, repeats, config.key_column is not None)
    parts = passes.encode(inputs, config, plan, facts, scans)
    splits = list(key_plan.splits)
    writers = (passes.shard_writers or ShardWriters)(staging, splits, config.num_shards)
    numbers: List[quantiles.ChunkNumbers] = []
    totals = _encode(parts, plan, writers, staging, profile.rows, config, "prepare", numbers)
    shard_records = writers.records
    if elsewhere is not None:
        elsewhere.update(writers.elsewhere)
    counts = dict(zip(SPLITS, totals.counts))
    _check_splits(counts, splits, config)
    schema = build_schema(decisions, totals, config)
    _write_schema(staging, schema)
    write_json(
        os.path.join(staging, PROFILE),
        _training_profile(staging, schema, totals, passes.train_numbers or (lambda: iter(numbers)), writers),
    )
    manifest = _manifest(
        staging,
        inputs,
        scans,
        file_starts,
        profile.rows,
        decisions,
        schema,
        totals,
        shard_records,
        config,
        writers.fingerprints,
    )
    write_json(os.path.join(staging, MANIFEST), manifest)
    return schema, counts, manifest


def _training_profile(
    staging: str, schema: Schema, totals: Totals, numbers: quantiles.Numbers, writers: ShardWriters
) -> Dict[str, Any]:
    """profile.json: from the chunks' training values (`numbers`: a pass over them, or a counter of them), else
    read back from the training shards where they are (a category count is incomplete: rare; this reads every
    training shard here, also those the workers wrote)."""
    rows = totals.counts[0]
    found = profile_summaries(schema, quantiles.profile_numbers(numbers), totals.categories, totals.missing[0], rows)
    if found is not None:
        return found
    shards = [writers.elsewhere.get(name, os.path.join(staging, name)) for name in writers.names[TRAIN]]
    return profile_split(shards, schema, rows)


def _score_into(
    staging: str, inputs: List[InputFile], schema: Schema, config: PrepareConfig, passes: Passes
) -> Dict[str, Any]:
    """Scoring's two passes: profile (keys, columns), check the columns, encode in input order, manifest."""
    header_check = scoring.header_check(schema, config.key_column)
    profile, chunk_rows, file_starts, scans = _profile(inputs, config, header_check, passes, "encode for scoring")
    extra = scoring.check_columns(profile, schema, config)
    key_plan = keys.scoring_plan([i.name for i in inputs], config.key_column is not None, profile.rows)
    repeats = passes.keys(profile, chunk_rows, key_plan, staging)
    facts = chunk_facts(profile, chunk_rows, repeats, config.key_column is not None)
    writers = ConsecutiveShards(staging, SPLITS[scoring.SPLIT], config.num_shards, profile.rows)
    plan = scoring.encode_plan(schema, config)
    parts = passes.encode(inputs, config, plan, facts, scans)
    totals = _encode(parts, plan, writers, staging, profile.rows, config, "encode for scoring")
    _write_schema(staging, schema)
    described = _described_inputs(inputs, scans, file_starts, profile.rows)
    manifest = scoring.manifest(staging, described, schema, extra, totals, writers.records, config)
    write_json(os.path.join(staging, MANIFEST), manifest)
    return manifest


def _write_schema(staging: str, schema: Schema) -> None:
    with open(os.path.join(staging, SCHEMA), "w", encoding="utf-8", newline="\n") as f:
        f.write(schema.to_json() + "\n")


def _profile(
    inputs: List[InputFile],
    config: PrepareConfig,
    header_check: Callable[[Chunk], None],
    passes: Passes,
    what: str,
) -> Tuple[Profile, List[Tuple[int, int]], List[int], List[FileScan]]:
    """Pass 1. Returns the merged profile, (file index, rows) per chunk, each file's first row index, and the
    file scans. Chunks are merged in input order, whoever profiled them.

    `header_check` sees each CSV file's first chunk (its header) before any of its rows are profiled. Rows read
    and their rate are reported as `what` (the total is not known yet)."""
    plan = ProfilePlan(
        config.label,
        config.key_column,
        frozenset(config.missing_values),
        config.eval_fraction,
        config.test_fraction,
        config.valid_fraction,
        config.max_classes,
    )
    profile, chunk_rows, scans = Profile(), [], []
    file_starts: List[int] = []
    progress = RowProgress(f"{what} (pass 1 of 2, reading)")
    for file_index, part in passes.profile(inputs, config, plan, header_check, scans):
        while len(file_starts) <= file_index:  # files without rows start where the next one does
            file_starts.append(profile.rows)
        profile.merge(part, config.max_classes)
        chunk_rows.append((file_index, part.rows))
        progress.update(part.rows)
    progress.finish()
    file_starts += [profile.rows] * (len(inputs) - len(file_starts))
    return profile, chunk_rows, file_starts, scans


def _profile_in_process(
    inputs: List[InputFile],
    config: PrepareConfig,
    plan: ProfilePlan,
    header_check: Callable[[Chunk], None],
    scans: List[FileScan],
) -> Iterator[Tuple[int, Profile]]:
    chunks = _checked(iter_chunks(inputs, config.chunk_bytes, scans), header_check)
    for chunk, part in ordered_map(profile_chunk, chunks, config.workers, init_profiler, plan):
        yield chunk.file_index, part


def _encode_in_process(
    inputs: List[InputFile],
    config: PrepareConfig,
    plan: EncodePlan,
    facts: Iterator[ChunkFacts],
    scans: List[FileScan],
) -> Iterator[ChunkResult]:
    for _, part in ordered_map(encode_chunk, _tasks(inputs, config, facts, scans), config.workers, init_encoder, plan):
        yield part


def _checked(chunks: Iterator[Chunk], header_check: Callable[[Chunk], None]) -> Iterator[Chunk]:
    """Runs `header_check` on each CSV file's first chunk before its rows are processed."""
    seen = -1
    for chunk in chunks:
        if chunk.fmt == CSV and chunk.file_index != seen:
            seen = chunk.file_index
            header_check(chunk)
        yield chunk


def _header_check(config: PrepareConfig) -> Callable[[Chunk], None]:
    """prepare's header check: label and key present, the same columns in every file (without a schema)."""
    first: Optional[Tuple[str, FrozenSet[str]]] = None

    def check(chunk: Chunk) -> None:
        nonlocal first
        first = _check_header(chunk, config, first)

    return check


def _check_header(chunk: Chunk, config: PrepareConfig, first: Optional[Tuple[str, FrozenSet[str]]]):
    header = chunk.columns or ()
    for role, name in (("label column", config.label), ("key column", config.key_column)):
        if name is not None and name not in header:
            raise DataError(
                f"{chunk.file_name} line 1: {role} {name!r} is not in the header; the columns are {list(header)}"
            )
    if first is None:
        return chunk.file_name, frozenset(header)
    if frozenset(header) != first[1] and config.schema_uri is None:
        raise DataError(
            f"{chunk.file_name} line 1: the header's columns differ from {first[0]}'s: missing "
            f"{sorted(first[1] - set(header))}, extra {sorted(set(header) - first[1])}; "
            "all CSV files need the same columns"
        )
    return first


def chunk_facts(
    profile: Profile,
    chunk_rows: List[Tuple[int, int]],
    repeats: Optional[Dict[int, Dict[int, Any]]],
    key_column: bool,
) -> Iterator[ChunkFacts]:
    """Pass-2 facts of every chunk, in input order: its first row index, its rows' repeat facts (`repeats`, by
    chunk; None: the encode pass reads them itself) and key hashes (when the merged profile kept them)."""
    first_row = 0
    for index, (file_index, n) in enumerate(chunk_rows):
        duplicates, occurrences = keys.split_facts((repeats or {}).get(index, {}), key_column)
        hashes = profile.key_hashes[index] if profile.key_hashes else None
        yield ChunkFacts(file_index, first_row, duplicates, occurrences, hashes)
        first_row += n


def _task_for(chunk: Chunk, facts: Optional[ChunkFacts]) -> ChunkTask:
    """A chunk read again, with its pass-1 facts; a chunk pass 1 did not see means the file changed."""
    if facts is None or facts.file_index != chunk.file_index:
        raise DataError(_changed_message(chunk.file_name))
    return ChunkTask(chunk, facts.first_row, facts.duplicates, facts.occurrences, facts.key_hashes)


def _changed_message(file_name: str) -> str:
    return f"{file_name} changed while it was being prepared; run again on unchanging input"


def _tasks(
    inputs: List[InputFile], config: PrepareConfig, facts: Iterator[ChunkFacts], scans: List[FileScan]
) -> Iterator[ChunkTask]:
    """Pass-2 tasks: the same chunks again, each with its first row index and its rows' duplicate facts."""
    rescans: List[FileScan] = []
    facts = iter(facts)
    for chunk in iter_chunks(inputs, config.chunk_bytes, rescans):
        yield _task_for(chunk, next(facts, None))
    _check_unchanged(scans, rescans, inputs)


def _check_unchanged(scans: List[FileScan], rescans: List[FileScan], inputs: List[InputFile]) -> None:
    for scan, rescan, item in zip(scans, rescans, inputs):
        if scan.sha256 != rescan.sha256:
            raise DataError(_changed_message(item.name))


IN_PROCESS = Passes(profile=_profile_in_process, encode=_encode_in_process, keys=keys.in_process)


def _encode(
    parts: Iterator[ChunkResult],
    plan: EncodePlan,
    writers: Any,
    staging: str,
    total_rows: int,
    config: PrepareConfig,
    what: str,
    train_numbers: Optional[List[quantiles.ChunkNumbers]] = None,
) -> Totals:
    """Pass 2's results, merged in input order: write good rows to shards (`ShardWriters` or
    `ConsecutiveShards`; closed here), bad rows to `QUARANTINE` in `staging` (or fail), unlabelled rows' cells to
    `UNLABELLED`, merge statistics, and gather the chunks' `train_numbers` into `train_numbers`
    (`quantiles.chunk_numbers` of each chunk); rows done, rate and ETA are reported as `what`."""
    totals = Totals(len(plan.features), max(100_000, 10 * config.max_vocabulary_size))
    progress = RowProgress(f"{what} (pass 2 of 2, encoding)", total=total_rows)
    quarantine, unlabelled = JsonLinesWriter(staging, QUARANTINE), JsonLinesWriter(staging, UNLABELLED)
    try:
        for part in parts:
            _handle_bad(part, quarantine, totals.bad, total_rows, config)
            for row in part.unlabelled:
                unlabelled.write(row["row"])
            for s, split in enumerate(SPLITS):
                if part.examples[s]:
                    writers.write(split, part.examples[s], part.hashes[s])
            totals.add(part)
            if part.train_numbers:
                train_numbers.append(quantiles.chunk_numbers(part.train_numbers))  # type: ignore[union-attr]
            progress.update(part.rows)
    finally:
        writers.close()
        quarantine.close()
        unlabelled.close()
    progress.finish()
    return totals


def _handle_bad(
    part: ChunkResult, quarantine: JsonLinesWriter, bad_so_far: int, total_rows: int, config: PrepareConfig
) -> None:
    if not part.bad:
        return
    if config.bad_rows == "fail":
        first = part.bad[0]
        raise DataError(
            f"{with_help(first['reason'], first['value'])} (fix the row, or set bad_rows='quarantine' to set bad rows "
            "aside)"
        )
    for bad in part.bad:
        quarantine.write(bad)
    bad = bad_so_far + len(part.bad)
    if bad > config.max_bad_fraction * total_rows:
        raise DataError(
            f"{bad} of {total_rows} rows are bad so far, more than max_bad_fraction={config.max_bad_fraction} "
            f"allows; the first: {_first_reason(quarantine)}. Fix the data, or raise max_bad_fraction"
        )


def _first_reason(quarantine: JsonLinesWriter) -> str:
    quarantine.close()
    with open(quarantine.path, encoding="utf-8") as f:
        first = json.loads(f.readline())
    return with_help(first["reason"], first["value"])


def _check_splits(counts: Dict[str, int], splits: List[str], config: PrepareConfig) -> None:
    """Every split asked for holds a row; the validation split may be empty (see `_split_notes`)."""
    good = sum(counts.values())
    for split in splits:
        if counts[split] == 0 and split != VALID:
            raise DataError(
                f"the {split} split is empty: {good} good row(s) are too few for eval_fraction={config.eval_fraction} "
                f"and test_fraction={config.test_fraction}; add rows or change the fractions"
            )


def _split_notes(counts: Dict[str, int], config: PrepareConfig) -> List[str]:
    if config.valid_fraction == 0 or counts[VALID] > 0:
        return []
    return [
        f"the valid split is empty ({sum(counts.values())} good rows, valid_fraction={config.valid_fraction}): "
        "training runs its whole budget without early stopping; add rows or raise valid_fraction"
    ]


def _manifest(
    staging: str,
    inputs: List[InputFile],
    scans: List[FileScan],
    file_starts: List[int],
    total_rows: int,
    decisions: Decisions,
    schema: Schema,
    totals: Totals,
    shard_records: Dict[str, int],
    config: PrepareConfig,
    elsewhere: Optional[Dict[str, Dict[str, Any]]] = None,
) -> Dict[str, Any]:
    """The manifest; `elsewhere` holds the fingerprints ({sha256, bytes}) of the shards stored outside `staging`,
    as their writers computed them."""
    described = _described_inputs(inputs, scans, file_starts, total_rows)
    outputs = output_fingerprints(staging, shard_records, elsewhere)
    caps = vocabulary_caps(decisions, schema, totals, config)
    manifest: Dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "config": config.recorded([i.name for i in inputs]),
        "inputs": described,
        "input_fingerprint": fingerprints.json_digest(described),
        "task": schema.label.task,
        "schema_source": _schema_source(decisions),
        "ignored_columns": list(decisions.ignored),
        "absent_columns": list(decisions.absent),
        "rows": {
            "total": total_rows,
            "written": sum(totals.counts),
            "bad": totals.bad,
            "quarantined": totals.bad,
            **({"unlabelled": totals.unlabelled} if totals.unlabelled else {}),
        },
        "counts": dict(zip(SPLITS, totals.counts)),
        "files": {s: [n for n in outputs if n.startswith(s + "/")] for s in SPLITS},
        "notes": _split_notes(dict(zip(SPLITS, totals.counts)), config)
        + notes(schema, totals, config)
        + [cap_note(cap) for cap in caps],
        "vocabulary_caps": caps,
        "outputs": outputs,
    }
    if totals.unlabelled:
        manifest["unlabelled_lines"] = totals.unlabelled_lines
    manifest.update(summary(schema, totals))
    manifest["fingerprint"] = fingerprints.json_digest({"inputs": manifest["input_fingerprint"], "outputs": outputs})
    return manifest


def _schema_source(decisions: Decisions) -> str:
    if decisions.reference is not None:
        return "reference"
    return "inferred" if decisions.supplied is None else "supplied"


def _described_inputs(
    inputs: List[InputFile], scans: List[FileScan], file_starts: List[int], total_rows: int
) -> List[Dict[str, Any]]:
    """The manifest's `inputs`: per file its location-free name, format, sha256, bytes and rows."""
    ends = list(file_starts[1:]) + [total_rows]
    return [
        {"name": i.name, "format": i.fmt, "sha256": s.sha256, "bytes": s.size, "rows": end - start}
        for i, s, start, end in zip(inputs, scans, file_starts, ends)
    ]
