"""Batch prediction with a published model, without training (`tpu-pipeline predict`).

`--model` names a publish root (its LATEST version), `ROOT/versions/V` or `ROOT/V`; `release` reads and checks
the version. What scores, and how:
  * a built-in family's export, in-process: raw CSV / JSON Lines rows are encoded through the export's schema by
    prepare's one encoder (`prepare.encode_for_scoring`, with the row rules the training run read its rows by:
    the export's `row_rules`), TFRecords are read as they are. The export's `serve` graph scores whole predict batches
    of the job's `predict_batch_size`, the last padded with empty Examples as the checkpoint path pads it
    (`inputs.padded_batches`), so each row's bytes are those of the pipeline's batch prediction with the same
    model under any kernel setting (oneDNN on or off): a short batch is another matrix shape, which may round
    differently. Padding is dropped and the rows are written by `shards.commit_rows`, keyed, in input order.
  * the same on Apache Beam: `predict.beam.predict_from_saved_model`, as the pipeline's beam engine scores.
  * a user's model_fn export: their model_fn (importable here, and on the Beam workers) with the export's
    variables, on TFRecords its feature spec describes: `engine.user.run.predict`, or on Apache Beam
    `engine.user.beam.predict`, as the pipeline's stages score them.
The output is published in one commit (`storage.commit_staged`); a non-empty output folder is refused.
A built-in family's rows are first checked against the export's training profile (`data_profile`), on either
engine, as the pipeline's stage checks them (`predict.skew`; on Beam the workers count the rows, with the same
skew.json bytes): skew.json beside the predictions, and with "block" nothing is published. A user's model_fn export
is checked the same way over the columns of its feature spec its training records were profiled by
(`model.user.profile`). Not checked (said in the report's `why`): an export without a profile.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple

from estimator_lib import release, storage
from estimator_lib.config import ConfigError, JobConfig
from estimator_lib.config.beam import BEAM, BeamConfig, check_engine
from estimator_lib.config.feature_spec import FeatureSpec
from estimator_lib.config.run import RAW, TFRECORD, prediction_kind
from estimator_lib.config.skew import SkewConfig
from estimator_lib.data import records
from estimator_lib.data.prepare import encode_for_scoring
from estimator_lib.data.score import ScoringData
from estimator_lib.engine.sources import beam_passes
from estimator_lib.engine.user import compat, run, stages
from estimator_lib.export import load_serving_model, read_export_metadata
from estimator_lib.model import inputs
from estimator_lib.model.user.model_fn import load_function
from estimator_lib.predict.batch import encoded_origins, raw_record
from estimator_lib.predict.jsonl import RowFormatter
from estimator_lib.predict.origins import Origins, record_origins
from estimator_lib.predict.predicted import PredictionCounter
from estimator_lib.predict.rows import slice_rows
from estimator_lib.predict.saved_model import predicted_batches, saved_model_provenance
from estimator_lib.predict.shards import PredictResult, commit_rows
from estimator_lib.predict.skew import SkewCheck, SkewReport
from estimator_lib.schema import Schema


@dataclasses.dataclass(frozen=True)
class Scored:
    """What `predict_published` did: the version it scored with, the committed predictions, and the skew check's
    report (None with `predict.skew=off`; "skipped" with its `why` when the rows could not be checked)."""

    version: release.PublishedModel
    predictions: PredictResult
    skew: Optional[SkewReport] = None


def published_version(model: str) -> release.PublishedModel:
    """The checked version `model` names: a publish root (its LATEST), `ROOT/versions/V`, or `ROOT/V`.

    Raises:
      FileNotFoundError: nothing is published under the root, or no such version (naming the path).
      LatestPointerError, ValueError: LATEST or the version's files are damaged (the message names the repair).
    """
    model = model.rstrip("/")
    parent, name = os.path.dirname(model), os.path.basename(model)
    if storage.exists(storage.join(model, release.POINTER)) or storage.list_files(
        storage.join(model, release.VERSIONS)
    ):
        found = release.latest(model)
        if found is None:
            raise FileNotFoundError(f"{storage.join(model, release.POINTER)}: nothing is published under {model}")
        return found
    root = os.path.dirname(parent) if os.path.basename(parent) == release.VERSIONS else parent
    if not storage.list_files(storage.join(root, release.VERSIONS)):
        raise FileNotFoundError(
            f"--model {model}: {storage.join(model, release.POINTER)} does not exist and it is no version folder "
            "(ROOT/versions/VERSION): nothing is published there; give a publish root (run-local --output DIR "
            "publishes to DIR/published) or one of its versions"
        )
    if not storage.is_committed(storage.join(root, release.VERSIONS, name)):
        newest = ", ".join(release.published_versions(root)[:3])
        raise FileNotFoundError(
            f"--model {model}: no published version {name!r} under {storage.join(root, release.VERSIONS)} (newest: "
            f"{newest}); give one of its versions, or the publish root {root} for its LATEST"
        )
    return release.intact_version(root, name)  # a ValueError naming the file when its files changed


def predict_published(
    model: str,
    data: Sequence[str],
    output_dir: str,
    engine: str = "inprocess",
    beam: Optional[BeamConfig] = None,
    skew: Optional[SkewConfig] = None,
) -> Scored:
    """Scores `data` (CSV / JSON Lines rows, or TFRecords) with the published version `model` names and commits
    the predictions at `output_dir` (JSON Lines shards and manifest.json, as the pipeline's batch prediction).

    The rows (a user's model_fn: its records) are checked against the export's training profile first (`skew`,
    None: the defaults, "warn"; skew.json is written beside the predictions, as the pipeline's batch prediction
    writes it).

    Raises:
      ValueError: `output_dir` is not empty, `data` mixes kinds, or a row lacks a feature column (DataError).
      FileNotFoundError: no such version, or no files match `data`.
      SkewError: with `predict.skew=block`, the rows are skewed (naming the worst features); nothing is published.
    """
    skew = skew or SkewConfig()
    check_engine(engine)
    _check_empty(output_dir)
    kind = _kind(data)
    version = published_version(model)
    metadata = read_export_metadata(version.uri)
    if "model_fn" in metadata:
        check = SkewCheck(metadata.get("data_profile"), skew)
        return Scored(
            version, *_user_predictions(version.uri, metadata, list(data), kind, output_dir, engine, beam, check)
        )
    predicted = (version.metadata.get("blessing") or {}).get("eval_predictions")
    scored = _built_in_predictions(version.uri, metadata, list(data), kind, output_dir, engine, beam, skew, predicted)
    return Scored(version, *scored)


def _check_empty(output_dir: str) -> None:
    if storage.list_files(output_dir):
        raise ValueError(f"--output {output_dir} is not empty; give a new or empty folder (predict replaces nothing)")


def _kind(data: Sequence[str]) -> str:
    try:
        kinds = {prediction_kind(d) for d in data}
    except ConfigError:
        kinds = set()
    if len(kinds) != 1 or not kinds <= {RAW, TFRECORD}:
        raise ValueError(
            f"--data {' '.join(data)}: give CSV / JSON Lines files (.csv, .jsonl, .json, .ndjson) or TFRecord "
            "files (.tfrecord), one kind at a time"
        )
    return kinds.pop()


def _metadata_field(export_dir: str, metadata: Mapping[str, Any], name: str, why: str) -> Any:
    if name not in metadata:
        raise ValueError(f"{export_dir}: its export_metadata.json records no {name!r} ({why}); export it again")
    return metadata[name]


def _built_in_predictions(
    export_dir: str,
    metadata: Mapping[str, Any],
    data: Sequence[str],
    kind: str,
    output_dir: str,
    engine: str,
    beam: Optional[BeamConfig],
    skew: SkewConfig,
    predicted: Optional[Mapping[str, Any]] = None,
) -> Tuple[PredictResult, Optional[SkewReport]]:
    """A built-in family's export: the rows encoded through its schema (raw rows) or read as they are (TFRecords),
    checked for skew and scored, on `engine`, the predictions compared with the eval rows' the version was blessed
    on (`predicted`, its record's; None: not compared); skew.json is committed with the predictions."""
    schema = Schema.from_dict(_metadata_field(export_dir, metadata, "schema", "the columns rows are read by"))
    job = JobConfig.from_dict(_metadata_field(export_dir, metadata, "job", "the predict batch size"))
    batch_size = job.training.predict_batch_size
    with tempfile.TemporaryDirectory(prefix="scoring-") as temporary:
        rows = None
        if kind == TFRECORD:
            files = inputs.resolve_files(data)
            with records.named_data_loss(files):
                records.check_features(files, schema)
            count, extra = None, {}
        else:
            with beam_passes(engine, beam or BeamConfig()) as passes:
                rules = dict(
                    metadata.get("row_rules", {})
                )  # the training run's; prepare's defaults before they were recorded
                rows = encode_for_scoring(list(data), schema, os.path.join(temporary, "rows"), passes=passes, **rules)
            files, count, extra = inputs.resolve_files(rows.files), rows.count, {"raw": raw_record(rows, None)}
        check = SkewCheck(metadata.get("data_profile"), skew, predicted)
        if engine == BEAM:
            return _on_beam(export_dir, schema, files, count, rows, output_dir, batch_size, extra, beam, check)
        origins = record_origins(files) if rows is None else encoded_origins(rows)
        count = origins.count if rows is None else count
        pending = check.start(files, schema, count)
        counter = check.counter() if pending is not None else None
        finish = check.finish(pending, counter)
        provenance = {**saved_model_provenance(export_dir, files, (), batch_size), **extra}
        result = _padded_saved_model(
            export_dir, schema, files, count, origins, output_dir, batch_size, provenance, counter, finish
        )
        return result, finish.report if finish is not None else None


def _on_beam(
    export_dir: str,
    schema: Schema,
    files: Sequence[str],
    count: Optional[int],
    rows: Optional[ScoringData],
    output_dir: str,
    batch_size: int,
    extra: Dict[str, Any],
    beam: Optional[BeamConfig],
    check: SkewCheck,
) -> Tuple[PredictResult, Optional[SkewReport]]:
    """`predict.beam.predict_from_saved_model`, as the pipeline's beam engine calls it, after the skew `check` of
    the rows profiled on the workers (`predict.skew_beam`); encoded `rows` are placed by their places table (None:
    TFRecords, by file and record)."""
    from estimator_lib.predict import beam as beam_predict  # Apache Beam takes about 1 s to import
    from estimator_lib.predict import skew_beam

    pending = skew_beam.start(check, files, schema, count, beam)
    counter = check.counter() if pending is not None else None
    finish = check.finish(pending, counter)
    places = None
    if rows is not None:
        places = beam_predict.PlacesRef.of(rows.output_dir, rows.manifest, rows.manifest["key_column"] is not None)
    result = beam_predict.predict_from_saved_model(
        export_dir,
        schema,
        list(files),
        output_dir,
        batch_size=batch_size,
        num_examples=count,
        beam_config=beam,
        provenance=extra,
        origins=places,
        counter=counter,
        finish=finish,
    )
    return result, finish.report if finish is not None else None


def _padded_saved_model(
    export_dir: str,
    schema: Schema,
    files: Sequence[str],
    count: int,
    origins: Origins,
    output_dir: str,
    batch_size: int,
    provenance: Dict[str, Any],
    counter: Optional[PredictionCounter] = None,
    finish: Optional[Callable[[str], None]] = None,
) -> PredictResult:
    """The export's `serve` graph on whole batches [batch_size] of serialized Examples, the last one padded with
    empty Examples (`inputs.padded_batches`, as the checkpoint path pads); the padding, which only follows the
    last real row, is dropped before the rows are written (and counted into `counter`; `finish` runs before
    the commit, `shards.publish`)."""
    model = load_serving_model(export_dir)
    try:
        padded = inputs.padded_batches(list(files), count, batch_size, inputs.eval_steps(count, batch_size), {})
        batches = predicted_batches(padded.map(lambda _, serialized: serialized), model, (), schema)

        def real() -> Iterator[Tuple[Any, Any]]:
            for k, (host, outputs) in enumerate(batches.as_numpy_iterator()):
                n = min(batch_size, count - k * batch_size)
                yield slice_rows(host, 0, n), slice_rows(outputs, 0, n)

        formatter = RowFormatter(schema, (), origins)
        return commit_rows(real(), formatter, count, output_dir, 1, provenance, counter, finish)
    finally:
        model.close()


def _user_predictions(
    export_dir: str,
    metadata: Mapping[str, Any],
    data: Sequence[str],
    kind: str,
    output_dir: str,
    engine: str,
    beam: Optional[BeamConfig],
    check: SkewCheck,
) -> Tuple[PredictResult, Optional[SkewReport]]:
    """A user's export: their model_fn with the export's variables, on TFRecords its feature spec describes,
    checked against the profile of its training records (`check`), as the pipeline's stage checks them."""
    spec_json = _metadata_field(export_dir, metadata, "feature_spec", "how its records are parsed")
    if kind != TFRECORD:
        raise ValueError(
            f"{export_dir} is a user model_fn's export: it scores TFRecords its feature spec describes; give "
            ".tfrecord files"
        )
    job = JobConfig.from_dict(metadata["job"]) if "job" in metadata else JobConfig()
    job = dataclasses.replace(job, tpu=dataclasses.replace(job.tpu, use_tpu=False))
    code = job.model.code  # the folder or wheel the run imported it from, as its stages locate it
    where = "" if code else " (its run gave no --code: install the package that holds it)"
    code_dir = stages.locate_code(code)
    load_function(metadata["model_fn"], f"{export_dir}: model_fn{where}", code_dir)  # before any work
    spec = FeatureSpec.from_json(spec_json, metadata.get("label"), metadata.get("key"))
    user = run.UserModel(metadata["model_fn"], spec, dict(metadata.get("hparams", {})), code_dir)
    files = inputs.resolve_files(data)
    with tempfile.TemporaryDirectory(prefix="published-") as work:
        if engine == BEAM:  # the workers read a gs:// export where it is, as the pipeline's beam engine does
            from estimator_lib.engine.user import beam as user_beam  # Apache Beam takes about 1 s to import

            finish = user_beam.skew_finish(check, files, spec, None, beam)
            where = export_dir if storage.is_gcs(export_dir) else work
            with compat.readable_checkpoint(export_dir, where) as checkpoint:
                on_beam = dict(beam_config=beam, code=code, finish=finish)
                result = user_beam.predict(job, user, files, work, output_dir, checkpoint_path=checkpoint, **on_beam)
        else:
            finish = run.skew_finish(check, files, spec, None)
            with compat.readable_checkpoint(export_dir, work) as checkpoint:
                result = run.predict(job, user, files, work, output_dir, checkpoint_path=checkpoint, finish=finish)
    return result, finish.report if finish is not None else None
