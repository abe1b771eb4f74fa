"""Batch prediction as an Apache Beam pipeline (`engine="beam"`): on the DirectRunner or a local Dask cluster in
tests and local runs, on Dataflow at scale. Everything runs on the workers' CPUs, with a `Scorer` loaded once per
worker process: an exported SavedModel's `serve` graph (`SavedModelScorer`), or a user's model_fn on its
checkpoint (`engine.user.beam.BeamScorer`).

The output is byte-identical to the in-process path's for the same input (`saved_model.predict_from_saved_model`,
`engine.user.run.predict`): the same batches (rows [k * batch_size, (k + 1) * batch_size) of the files in
order, across file ends, so the model sees the same matrices), the same model, the same JSON Lines formatter,
the same shard ranges and manifest, and the same atomic commit (`shards.publish`). `score` first checks the rows
for skew, profiled on the workers (`skew_beam`), and writes the skew.json bytes the in-process engine writes.

    pipeline 1: files --> count each file's records (one worker per file) --> the launcher reads the counts
    pipeline 2: (file, first row, rows) --> one worker reads the file, predicts the batches that lie inside
                it and writes their rows as part files, one per shard it touches
            +--> rows of batches that span a file end --GroupByKey batch--> predicted, written as part files
          part references --GroupByKey shard--> one worker concatenates a shard's parts in row order

Only references and the rows of batches that span file ends (fewer than 2 batches per file) travel through
the runner, so nothing on the launcher grows with the rows: the launcher holds the per-file counts, the plan and
the shards' manifest entries. The launcher then commits the shards with the manifest (with a local runner the
workers write the shards into its staging directory; Dataflow's stay in the work directory until the commit
copies them on the server into the output: no shard's bytes pass through the launcher).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import queue
import threading
from typing import Any, Callable, Dict, Hashable, Iterator, List, Mapping, Optional, Protocol, Sequence, Tuple

import tensorflow as tf

from estimator_lib import storage
from estimator_lib.config import JobConfig
from estimator_lib.config.beam import BeamConfig
from estimator_lib.config.skew import DEFAULT_SKEW, SkewConfig
from estimator_lib.data import beam_runners, places
from estimator_lib.data.beam import beam, beam_passes, read_pickles, require_beam, work_directory, write_pickle
from estimator_lib.data.common import EVAL
from estimator_lib.data.prepare import PrepareResult, encode_for_scoring
from estimator_lib.export import export_model, load_serving_model
from estimator_lib.model import inputs
from estimator_lib.model.outputs import PredictionError
from estimator_lib.predict.batch import raw_record
from estimator_lib.predict.columns import Column
from estimator_lib.predict.jsonl import RowFormatter
from estimator_lib.predict.origins import KeyedOrigins, Origins, RecordOrigins
from estimator_lib.predict.predicted import PredictionCounter
from estimator_lib.predict.rows import slice_rows
from estimator_lib.predict.saved_model import check_saved_model_arguments, predicted_batches, saved_model_provenance
from estimator_lib.predict.shards import PredictResult, formatted_pieces, publish, shard_name, shard_sizes
from estimator_lib.predict.skew import SkewCheck
from estimator_lib.predict.skew_beam import start
from estimator_lib.predict.sources import encoded_rows_uri, prediction_source, scoring_options
from estimator_lib.schema import Schema

EXPORT_SUFFIX = "-saved_model"
COUNTS, PARTS, SHARDS, FIELDS = "counts", "parts", "shards", "fields.pkl"


@dataclasses.dataclass(frozen=True)
class PlacesRef:
    """A prepared dataset's places table (`data.places`), named rather than held: each worker process reads
    it once (`origins`), so the launcher never holds a table that grows with the rows.

    Attributes:
      output_dir: the preparation (or the rows encoded for scoring) that wrote `<split>_places.npy`.
      split: whose places ("eval" for rows encoded for scoring).
      names: the input files in the manifest's `inputs` order.
      key_column: the keys are a key column's values.
    """

    output_dir: str
    split: str
    names: Tuple[str, ...]
    key_column: bool

    def origins(self) -> KeyedOrigins:
        """The rows' origins, the table read once per worker process."""
        with _LOCK:
            if self not in _PLACES:
                _PLACES[self] = KeyedOrigins(
                    places.read_places(self.output_dir, self.split), self.names, self.key_column
                )
            return _PLACES[self]

    @classmethod
    def of(cls, output_dir: str, manifest: Dict[str, Any], key_column: bool, split: str = EVAL) -> "PlacesRef":
        return cls(output_dir, split, tuple(d["name"] for d in manifest.get("inputs", [])), key_column)


class Scorer(Protocol):
    """What the workers score records with: picklable, named in the plan, loaded once per worker process.

    `load()` gives a predictor whose `predict(records)` takes one batch (serialized records, in input order) and
    returns (host rows, outputs) with a row per record (`shards.formatted_pieces`), and `close()` frees it;
    `formatter(files, per_file)` gives the JSON Lines formatter (`format(host, outputs, first_row)`, its
    `fields`) of rows placed in those files."""

    @property
    def cache_key(self) -> Hashable: ...

    def load(self) -> Any: ...

    def formatter(self, files: Sequence[str], per_file: Sequence[int]) -> Any: ...


@dataclasses.dataclass(frozen=True)
class SavedModelScorer:
    """An export's `serve` graph (`saved_model.predicted_batches`), rows formatted by `jsonl.RowFormatter`; the
    rows' origins as for `predict_from_saved_model`."""

    export_dir: str
    schema: Schema
    columns: Tuple[Column, ...]
    origins: Optional[KeyedOrigins | PlacesRef]

    @property
    def cache_key(self) -> Hashable:
        return (self.export_dir, tuple(c.name for c in self.columns))

    def load(self) -> "FedBatches":
        model = load_serving_model(self.export_dir)

        def outputs(batches: Callable[[], Iterator[List[bytes]]]) -> Iterator[Any]:
            fed = tf.data.Dataset.from_generator(batches, output_signature=tf.TensorSpec([None], tf.string))
            return predicted_batches(fed, model, self.columns, self.schema).as_numpy_iterator()

        return FedBatches(outputs)

    def formatter(self, files: Sequence[str], per_file: Sequence[int]) -> RowFormatter:
        if self.origins is None:
            origins: Origins = RecordOrigins(files, per_file)
        else:
            origins = self.origins.origins() if isinstance(self.origins, PlacesRef) else self.origins
        return RowFormatter(self.schema, self.columns, origins)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What the workers need: the scorer, the batch size, the shards, the input files, each file's records and
    their compression ("GZIP" or "")."""

    scorer: Scorer
    batch_size: int
    num_shards: int
    shard_dir: str
    work: str
    files: Tuple[str, ...]
    per_file: Tuple[int, ...]
    compression: str = ""
    counter: Optional[PredictionCounter] = None  # at zero: each part counts its rows' predictions in a fresh copy

    @property
    def count(self) -> int:
        return sum(self.per_file)

    @property
    def ends(self) -> List[int]:
        """Each shard's end row (exclusive)."""
        return list(itertools.accumulate(shard_sizes(self.count, self.num_shards)))


_LOCK = threading.Lock()
_PLACES: Dict[PlacesRef, KeyedOrigins] = {}
_PREDICTORS: Dict[Hashable, Any] = {}
_END = object()  # the end of the batches `FedBatches` feeds


def predict_from_saved_model(
    export_dir: str,
    schema: Schema,
    data: inputs.Patterns,
    output_dir: str,
    *,
    batch_size: int = 256,
    num_examples: Optional[int] = None,
    passthrough: Sequence[str] = (),
    num_shards: int = 1,
    beam_config: Optional[BeamConfig] = None,
    provenance: Optional[Dict[str, Any]] = None,
    origins: Optional[KeyedOrigins | PlacesRef] = None,
    counter: Optional[PredictionCounter] = None,
    finish: Optional[Callable[[str], None]] = None,
) -> PredictResult:
    """`saved_model.predict_from_saved_model` on Apache Beam: the same arguments, the same output.

    Args:
      export_dir, schema, data, output_dir, batch_size, num_examples, passthrough, num_shards: as for
        `saved_model.predict_from_saved_model`. A wrong `num_examples` fails and publishes nothing.
      beam_config: where the pipeline runs (None: the DirectRunner on this machine).
      provenance: entries added to the manifest (None adds none, keeping it identical to the in-process one).
      origins: prepared rows' origins: a `PlacesRef` (read by the workers) or a `KeyedOrigins` (shipped to
        them with the plan); None places each row by its TFRecord file and record index.
      counter, finish: as for `score_records`.
    """
    columns = check_saved_model_arguments(schema, batch_size, passthrough, num_shards, num_examples)
    files = inputs.resolve_files(data)
    record = {**saved_model_provenance(export_dir, files, columns, batch_size), **(provenance or {})}
    keyed = origins if not isinstance(origins, PlacesRef) else KeyedOrigins(None, origins.names, origins.key_column)
    fields = RowFormatter(schema, columns, RecordOrigins(files, []) if origins is None else keyed).fields
    scorer = SavedModelScorer(export_dir, schema, columns, origins)
    return score_records(
        scorer,
        files,
        output_dir,
        batch_size,
        num_examples,
        num_shards,
        fields,
        record,
        beam_config,
        counter=counter,
        finish=finish,
    )


def score_records(
    scorer: Scorer,
    files: Sequence[str],
    output_dir: str,
    batch_size: int,
    num_examples: Optional[int],
    num_shards: int,
    fields: Sequence[str],
    provenance: Dict[str, Any],
    beam_config: Optional[BeamConfig] = None,
    compression: str = "",
    counter: Optional[PredictionCounter] = None,
    finish: Optional[Callable[[str], None]] = None,
) -> PredictResult:
    """Scores the records of `files` (in this order) with `scorer` on Apache Beam, batch k being rows
    [k * batch_size, (k + 1) * batch_size) across file ends, and publishes `num_shards` JSON Lines shards and
    their manifest (`provenance` added, `fields` as its fields, or those row 0's formatter found) in one commit.
    `compression`: the files' ("GZIP" or ""). `counter`: the predictions are counted into it (the workers count
    their parts, the launcher adds the parts' counts); `finish`: as for `shards.publish`.

    A wrong `num_examples` (None: counted) fails before anything is scored and publishes nothing."""
    require_beam()
    config = beam_config or BeamConfig()
    found = list(fields)
    elsewhere: Dict[str, str] = {}  # Dataflow's shards, where its workers wrote them (`_collect_shards`)

    def write_shards(staging: str, work: str) -> List[Dict[str, Any]]:
        with beam_runners.session(config) as run:
            shard_dir = staging if config.is_local else storage.join(work, SHARDS)
            tf.io.gfile.makedirs(storage.join(work, PARTS))
            per_file = _count_files(list(files), work, run, num_examples, compression)
            zero = counter.fresh() if counter is not None else None
            plan = _Plan(scorer, batch_size, num_shards, shard_dir, work, tuple(files), per_file, compression, zero)
            try:
                run(lambda p: _prediction_pipeline(p, plan), "batch-predict")
            finally:
                _release(scorer)
            if storage.exists(storage.join(work, FIELDS)):
                found[:] = next(read_pickles([storage.join(work, FIELDS)]))
            return _collect_shards(plan, staging, elsewhere, counter)

    with work_directory(config, "predict") as work:  # kept until the commit has copied the shards out of it
        return publish(
            lambda staging: write_shards(staging, work), found, output_dir, num_shards, provenance, elsewhere, finish
        )


def score(
    job: JobConfig,
    prepared: PrepareResult,
    model_dir: str,
    data: str,
    output_dir: str,
    beam_config: Optional[BeamConfig] = None,
    skew: SkewConfig = DEFAULT_SKEW,
    predicted: Optional[Mapping[str, Any]] = None,
) -> PredictResult:
    """`predict.score` on Apache Beam: checks the rows for skew (profiled on the workers, `skew_beam`), exports
    the model's CPU SavedModel beside `output_dir` (`<output_dir>-saved_model/<version>`, verified as the export
    stage verifies it), then scores what `data` names with it. Raw CSV / JSON Lines rows are encoded through the
    prepared schema on Beam first (kept in `<output_dir>-rows`). Predictions equal the checkpoint's to 1e-5 (the
    export's verification) and are byte-identical to `saved_model.predict_from_saved_model` with the same export;
    skew.json is committed with them, the bytes `predict.score` writes for the same rows (its predictions' part
    counted from the export's outputs: a row on a near-tie may count in another class, `predict.predicted`).

    Args:
      job: the trained model's job config, placed on the host CPU (`tpu.use_tpu=False`).
      prepared, model_dir, data, output_dir, skew, predicted: as for `predict.score`.
      beam_config: where the pipelines run (None: the DirectRunner on this machine).

    Raises:
      SkewError: with `predict.skew=block`, the rows are skewed; nothing is exported, scored or published.
    """
    source = prediction_source(data, prepared)
    uri, count, extra = source.uri, source.count, {}
    origins = None
    if source.split is not None:
        origins = PlacesRef.of(
            prepared.output_dir, prepared.manifest, prepared.schema.key_column is not None, source.split
        )
    if source.raw:
        with beam_passes(beam_config or BeamConfig()) as passes:
            rows = encode_for_scoring(
                source.uri, prepared.schema, encoded_rows_uri(output_dir), passes=passes, **scoring_options(prepared)
            )
        uri, count = rows.files, rows.count
        extra = {"raw": raw_record(rows, encoded_rows_uri(output_dir))}
        origins = PlacesRef.of(rows.output_dir, rows.manifest, rows.manifest["key_column"] is not None)
    check = SkewCheck(prepared.profile(), skew, predicted)
    pending = start(check, inputs.resolve_files(uri), prepared.schema, count, beam_config)
    counter = check.counter() if pending is not None else None
    exported = export_model(job, prepared.schema, model_dir, output_dir.rstrip("/") + EXPORT_SUFFIX, verify_rows=uri)
    return predict_from_saved_model(
        exported.export_dir,
        prepared.schema,
        uri,
        output_dir,
        batch_size=job.training.predict_batch_size,
        num_examples=count,
        beam_config=beam_config,
        provenance=extra,
        origins=origins,
        counter=counter,
        finish=check.finish(pending, counter),
    )


# -- pipeline 1: the files' records -----------------------------------------------------------------------------
def _count_files(
    files: List[str], work: str, run: beam_runners.Run, num_examples: Optional[int], compression: str
) -> Tuple[int, ...]:
    """Each file's records, counted on the workers; the launcher reads one number per file."""

    def build(pipeline: Any) -> None:
        _ = (
            pipeline
            | "Files" >> beam.Create(list(enumerate(files)))
            | "Spread" >> beam.Reshuffle()
            | "Count" >> beam.Map(_count_file, work, compression)
        )

    run(build, "batch-predict-count")
    per_file = tuple(read_pickles(storage.join(work, COUNTS, f"{i:06d}.pkl") for i in range(len(files))))
    if num_examples is not None and sum(per_file) != num_examples:
        raise PredictionError(
            f"num_examples={num_examples} but the inputs hold {sum(per_file)} records; pass the right count "
            "(prepare's manifest) or None to count"
        )
    return per_file


def _count_file(element: Tuple[int, str], work: str, compression: str) -> None:
    index, path = element
    write_pickle(storage.join(work, COUNTS, f"{index:06d}.pkl"), inputs.count_records([path], compression))


# -- pipeline 2: predicting -------------------------------------------------------------------------------------
def _prediction_pipeline(pipeline: Any, plan: _Plan) -> None:
    starts = [sum(plan.per_file[:i]) for i in range(len(plan.files))]
    tasks = [(i, starts[i], n) for i, n in enumerate(plan.per_file) if n]
    read = (
        pipeline
        | "Files" >> beam.Create(tasks)
        | "Spread" >> beam.Reshuffle()
        | "Read" >> beam.FlatMap(_file_rows, plan)
    )
    inside = read | "Inside" >> beam.Filter(lambda e: e[0] == _PART) | "Parts" >> beam.Map(lambda e: e[1])
    spanning = (
        read
        | "Spanning" >> beam.Filter(lambda e: e[0] == _ROW)
        | "Rows" >> beam.Map(lambda e: e[1])
        | "Batch" >> beam.GroupByKey()
        | "PredictSpanning" >> beam.FlatMap(_spanning_batch, plan)
    )
    _ = (
        (inside, spanning)
        | "AllParts" >> beam.Flatten()
        | "Shard" >> beam.GroupByKey()
        | "Write" >> beam.Map(_write_shard, plan)
    )


_PART, _ROW = "part", "row"
_PREDICTED = "predicted"  # a shard entry's prediction counts, on their way to the launcher
# (shard, (first row, rows, part file URI, its rows' prediction counts: () when not counted))
PartRef = Tuple[int, Tuple[int, int, str, Tuple[int, ...]]]


def _file_rows(task: Tuple[int, int, int], plan: _Plan) -> Iterator[Tuple[str, Any]]:
    """Reads one file: predicts the batches that lie inside it and writes their rows as part files
    ((_PART, part reference)); the rows of batches that span one of its ends go on as (_ROW, (batch, (row,
    record))) to be batched with the neighbouring files' rows."""
    index, start, n = task
    low, high = _inside(start, start + n, plan.batch_size, plan.count)
    dataset = tf.data.TFRecordDataset([plan.files[index]], compression_type=plan.compression)
    for offset, record in enumerate(dataset.take(low - start).as_numpy_iterator()):
        yield _ROW, ((start + offset) // plan.batch_size, (start + offset, record))
    if high > low:
        batches = dataset.skip(low - start).take(high - low).batch(plan.batch_size)
        for ref in _write_parts(plan, low, (list(b) for b in batches.as_numpy_iterator())):
            yield _PART, ref
    for offset, record in enumerate(dataset.skip(high - start).as_numpy_iterator()):
        yield _ROW, ((high + offset) // plan.batch_size, (high + offset, record))


def _inside(start: int, end: int, batch_size: int, count: int) -> Tuple[int, int]:
    """Rows [low, high) of a file holding rows [start, end): the batches lying wholly inside it (the last
    batch of the input ends at `count`)."""
    low = min(-(-start // batch_size) * batch_size, end)
    high = end if end == count else end // batch_size * batch_size
    return low, max(high, low)


def _spanning_batch(element: Tuple[int, Any], plan: _Plan) -> List[PartRef]:
    """A batch whose rows came from two or more files, predicted and written as part files."""
    _, rows = element
    ordered = sorted(rows, key=lambda r: r[0])
    return _write_parts(plan, ordered[0][0], iter([[record for _, record in ordered]]))


def _write_parts(plan: _Plan, first_row: int, batches: Iterator[List[bytes]]) -> List[PartRef]:
    """Predicts consecutive batches starting at input row `first_row` and writes their JSON Lines as part
    files, a new one at each shard; returns the parts' references (with their rows' prediction counts when the
    plan counts them)."""
    predictor, formatter, ends = _predictor(plan), plan.scorer.formatter(plan.files, plan.per_file), plan.ends
    refs: List[PartRef] = []
    counters: List[PredictionCounter] = []  # one per part
    out, row = None, first_row
    try:
        for records in batches:
            host, outputs = predictor.predict(records)
            start = row
            for shard, rows, data in formatted_pieces(host, outputs, formatter, row, ends):
                if not refs or refs[-1][0] != shard:
                    if out is not None:
                        out.close()
                    uri = storage.join(plan.work, PARTS, f"{shard:05d}-{row:012d}.part")
                    out, refs = tf.io.gfile.GFile(uri, "wb"), refs + [(shard, (row, 0, uri, ()))]
                    counters += [plan.counter.fresh()] if plan.counter is not None else []
                out.write(data)
                if counters:
                    counters[-1].add(slice_rows(outputs, row - start, row - start + rows))
                shard_, (first, count, uri, _) = refs[-1]
                refs[-1] = (shard_, (first, count + rows, uri, ()))
                row += rows
    finally:
        if out is not None:
            out.close()
    if first_row == 0 and refs:  # one writer: the output's fields, as the formatter found them
        write_pickle(storage.join(plan.work, FIELDS), list(formatter.fields))
    if counters:
        refs = [(s, (f, n, u, tuple(int(c) for c in k.counts))) for (s, (f, n, u, _)), k in zip(refs, counters)]
    return refs


def _predictor(plan: _Plan) -> Any:
    """The worker process's predictor for this plan's scorer, loaded once."""
    key = plan.scorer.cache_key
    with _LOCK:
        if key not in _PREDICTORS:
            _PREDICTORS[key] = plan.scorer.load()
        return _PREDICTORS[key]


def _release(scorer: Scorer) -> None:
    """Closes this process's predictor of `scorer`, if it loaded one (a runner in the launcher's process)."""
    with _LOCK:
        predictor = _PREDICTORS.pop(scorer.cache_key, None)
    if predictor is not None:
        predictor.close()


class FedBatches:
    """One long-lived prediction loop over batches handed in one at a time: `outputs(batches)` builds it over
    the generator function `batches` (one tf.data pipeline, or one estimator's predict loop, per worker process:
    building one per batch would trace the model again for every batch). The loop is built, resumed and ended on
    a thread of its own: a suspended estimator loop keeps its graph the default graph of its thread."""

    def __init__(self, outputs: Callable[[Callable[[], Iterator[Any]]], Iterator[Any]]):
        self._batches: queue.Queue = queue.Queue()
        self._calls: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        threading.Thread(target=self._loop, args=(outputs,), name="fed-batches", daemon=True).start()

    def _fed(self) -> Iterator[Any]:
        while (batch := self._batches.get()) is not _END:
            yield batch

    def _loop(self, outputs: Callable[[Callable[[], Iterator[Any]]], Iterator[Any]]) -> None:
        results = outputs(self._fed)
        while self._calls.get():
            try:
                self._results.put((next(results), None))
            except Exception as error:  # noqa: BLE001 - raised again by `predict`, in the caller's thread
                self._results.put((None, error))
        getattr(results, "close", lambda: None)()
        self._results.put((None, None))

    def predict(self, batch: Any) -> Any:
        with self._lock:  # several threads may predict; batch in, its result out
            self._batches.put(batch)
            self._calls.put(True)
            result, error = self._results.get()
        if error is not None:
            raise error
        return result

    def close(self) -> None:
        """Ends the loop (an estimator's session is closed; a pipeline reading ahead gets the end of its input)."""
        with self._lock:
            self._batches.put(_END)
            self._calls.put(False)
            self._results.get()


def _write_shard(element: Tuple[int, Any], plan: _Plan) -> None:
    """Concatenates one shard's parts in row order into the shard file (one worker per shard, streaming) and
    records its manifest entry."""
    shard, refs = element
    name = shard_name(shard, plan.num_shards)
    digest, size, rows = hashlib.sha256(), 0, 0
    expected = plan.ends[shard] - shard_sizes(plan.count, plan.num_shards)[shard]
    counter = plan.counter.fresh() if plan.counter is not None else None
    with tf.io.gfile.GFile(storage.join(plan.shard_dir, name), "wb") as out:
        for first, count, uri, counts in sorted(refs):
            if first != expected:
                raise PredictionError(f"shard {shard}: a part starts at row {first}, row {expected} was expected")
            with tf.io.gfile.GFile(uri, "rb") as part:
                while chunk := part.read(1 << 22):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
            rows, expected = rows + count, expected + count
            if counter is not None:
                counter.absorb(counts)
    entry = {"file": name, "rows": rows, "bytes": size, "sha256": digest.hexdigest()}
    if counter is not None:  # taken out of the entry by the launcher (`_collect_shards`)
        entry[_PREDICTED] = [int(c) for c in counter.counts]
    write_pickle(storage.join(plan.work, SHARDS, f"{shard:05d}.pkl"), entry)


def _collect_shards(
    plan: _Plan, staging: str, elsewhere: Dict[str, str], counter: Optional[PredictionCounter] = None
) -> List[Dict[str, Any]]:
    """The shards' manifest entries in order. A shard the workers wrote outside `staging` is added to
    `elsewhere` ({name: where it is}: the commit copies it from there, on the server between gs:// locations);
    shards without rows are written empty into `staging`. Each shard's prediction counts are added into
    `counter`."""
    entries = []
    for shard, planned in enumerate(shard_sizes(plan.count, plan.num_shards)):
        name = shard_name(shard, plan.num_shards)
        entry_uri = storage.join(plan.work, SHARDS, f"{shard:05d}.pkl")
        if storage.exists(entry_uri):
            entry = next(read_pickles([entry_uri]))
            counts = entry.pop(_PREDICTED, None)
            if counter is not None and counts is not None:
                counter.absorb(counts)
            if plan.shard_dir != staging:
                elsewhere[name] = storage.join(plan.shard_dir, name)
        else:
            open(os.path.join(staging, name), "wb").close()
            entry = {"file": name, "rows": 0, "bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()}
        if entry["rows"] != planned:
            raise PredictionError(f"shard {shard} holds {entry['rows']} rows, {planned} were planned")
        entries.append(entry)
    return entries
