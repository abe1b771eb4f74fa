"""What a stage reports about its outputs: the metadata of its KFP artifacts.

Every `describe_*` first checks that the output really exists (`adapter.require_output`), so a component never
reports success for an output that is not there; then it records what a later stage, the Vertex AI console or
a run's summary reads: counts, URIs, the verdict, content fingerprints.

An artifact's metadata is passed, inside the executor input, on the command line of every stage that reads the
artifact (by the KFP local runner and on Vertex AI alike), and Linux takes at most 128 KiB in one argument. So
what grows with the data's columns (signatures, schemas, per-feature figures) is kept in files inside the
artifact, and the metadata names the file and gives a bounded summary.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Any, Mapping

from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Markdown, Metrics, Model

from components import registry
from components.adapter import require_output
from components.registry import BLESSING_FILE, PUBLICATION_FILE
from estimator_lib import storage
from estimator_lib.cloud.tasks import WARNING_KEY
from estimator_lib.config import JobConfig
from estimator_lib.config.stages import IMPORTANCE_FILE, SERVING_CHECK_FILE, SLICES_FILE
from estimator_lib.data.validation import ValidationReport
from estimator_lib.engine import Source
from estimator_lib.estimator import TrainResult
from estimator_lib.evaluation import Evaluation, slices
from estimator_lib.evaluation.report import WrittenReport
from estimator_lib.export import METADATA_FILE, ExportResult
from estimator_lib.fingerprints import fingerprint_directory
from estimator_lib.model.user.prepare import RecordsValidation
from estimator_lib.predict import PredictResult, skew
from estimator_lib.release import Release
from estimator_lib.strict import STRICT_FILE

if TYPE_CHECKING:
    # Not at run time: cloud.model_registry loads google-cloud-aiplatform, which only the register step needs.
    from estimator_lib.cloud.model_registry import Registration

log = logging.getLogger("components")
REGISTRATION_FILE = "registration.json"
VALIDATION_FILE = "validation.json"  # inside the prepared Dataset: every validation figure and breach
MAX_BREACHES, MAX_SUMMARY = 10, 2000  # what of them the Dataset's metadata keeps
MAX_IMPORTANCE, MAX_NAME = 10, 100  # features of each ranking the Blessing's metadata keeps; characters of a name
MAX_FINDINGS = 20  # strict-mode findings the Model's metadata names (every one is in its record)


def read_drift(dataset: Dataset) -> dict[str, Any]:
    """The prepare stage's drift table, {feature: {figure: value}} ({} when it checked none)."""
    details = dict(dataset.metadata.get("validation", {})).get("details_uri")
    if not details or not storage.exists(details):
        return {}
    return dict(json.loads(storage.read_text(details)).get("drift") or {})


def read_preflight_lines(model: Model) -> list[str] | None:
    """The train stage's preflight (strict mode's record, `strict.preflight` in the Model's metadata) as its
    console block; None when it made none."""
    uri = dict(dict(model.metadata.get("strict") or {}).get("preflight") or {}).get("uri")
    if not uri or not storage.exists(uri):
        return None
    return list(json.loads(storage.read_text(uri)).get("lines") or []) or None


def describe_dataset(dataset: Dataset, source: Source) -> None:
    """Prepared Dataset: split counts, where its schema (or a user model's feature spec) is, label and task,
    content fingerprint."""
    facts = source.facts()
    schema_uri = storage.join(dataset.uri, facts.pop("schema_file"))
    require_output(schema_uri, "the prepared schema")
    dataset.metadata.update(
        {
            "counts": facts["counts"],
            "schema_uri": schema_uri,
            "manifest_uri": storage.join(dataset.uri, "manifest.json"),
            **facts,
            "fingerprint": registry.fingerprint("dataset", dataset.uri, {}),
        }
    )


def data_source(patterns: list[str], source: Source) -> dict[str, Any]:
    """The data preparation read, for the stage's manifest: the configured files or globs, each file's name, size,
    rows and sha256, and the fingerprint over them (the prepared manifest's `input_fingerprint`)."""
    return {
        "uri": list(patterns),
        "fingerprint": source.manifest["input_fingerprint"],
        "files": [dict(described) for described in source.manifest["inputs"]],
    }


def describe_validation(
    dataset: Dataset, report_artifact: Markdown, report: ValidationReport | RecordsValidation
) -> None:
    """The data validation: its verdict on the Dataset (a run's summary reads it there), bounded whatever the
    number of columns (metadata travels on the next stages' command lines); every figure and breach in
    validation.json inside the Dataset (written before the Dataset is fingerprinted); the Markdown report as an
    artifact of its own (the Vertex AI console shows it)."""
    require_output(report_artifact.uri, "the data validation report")
    full = {**report.to_dict(), "drift": report.drift()}  # drift: the evaluation report's table
    details_uri = storage.join(dataset.uri, VALIDATION_FILE)
    storage.write_text(details_uri, json.dumps(full, indent=2, sort_keys=True))
    outcome = {k: v for k, v in full.items() if k not in ("findings", "drift", "breaches")}
    summary = outcome["summary"]
    if len(summary) > MAX_SUMMARY:
        summary = summary[:MAX_SUMMARY] + f"... (every breach in {details_uri})"
    outcome.update(
        summary=summary,
        breaches=full["breaches"][:MAX_BREACHES],
        breach_count=len(full["breaches"]),
        report_uri=report_artifact.uri,
        details_uri=details_uri,
    )
    dataset.metadata["validation"] = outcome
    report_artifact.metadata.update({"status": report.status, "summary": summary})
    log.info("data validation: %s", report.summary())


def describe_model(model: Model, result: TrainResult, job: JobConfig, warm_started_from: str | None) -> None:
    """Trained Model: the checkpoint directory is the artifact's uri; global step, checkpoint, config, and the
    fingerprint of the checkpoint's variables (its .index and .data files: equal variables, equal fingerprint,
    also for training resumed from a checkpoint, whose .meta graph differs)."""
    require_output(result.checkpoint + ".index", "the final checkpoint")
    model.metadata.update(
        {
            "model_dir": model.uri,
            "global_step": int(result.global_step),
            "checkpoint": result.checkpoint,
            "warm_started_from": warm_started_from or "",
            "config": job.to_dict(),
            "fingerprint": registry.fingerprint("model", model.uri, {"checkpoint": result.checkpoint}),
            "trained_steps": int(result.trained_steps),
            "budget": int(result.budget),
            "stopped": result.validation.stopped if result.validation else "",
            "strict": strict_summary(model.uri),
        }
    )


def strict_summary(model_dir: str) -> dict[str, Any] | None:
    """What the train stage's TPU-strict check found (`strict.record_report`'s record beside the checkpoints),
    bounded for the metadata: the counts by class and the first `MAX_FINDINGS` findings by name, class and the
    pattern that accepted them; every message in the record at `uri`. None when strict mode was off."""
    uri = storage.join(model_dir, STRICT_FILE)
    if not storage.exists(uri):
        return None
    record = json.loads(storage.read_text(uri))
    named = [{k: f[k] for k in ("name", "severity", "accepted_by")} for f in record["findings"][:MAX_FINDINGS]]
    return {"checks": record["checks"], "counts": record["counts"], "findings": named, "uri": uri}


def describe_evaluation(
    evaluation: Evaluation,
    metrics: Metrics,
    classification_metrics: ClassificationMetrics,
    blessing: Artifact,
    based_on: str,
) -> None:
    """Metrics (eval split), ClassificationMetrics (confusion matrix, ROC curve) and the Blessing record
    (whose blessing.json `adapter.write_blessing` wrote), with the LATEST version it was decided against. Call it
    after `describe_slices`: the fingerprint covers every file of the Blessing (`blessing_files`)."""
    require_output(storage.join(blessing.uri, BLESSING_FILE), "the evaluation's blessing")
    importance = describe_importance(evaluation, blessing)
    for name, value in sorted(evaluation.metrics.items()):
        metrics.log_metric(name, float(value))
    metrics.log_metric("blessed", 1.0 if evaluation.blessing.blessed else 0.0)
    if evaluation.confusion_matrix is not None:
        classification_metrics.log_confusion_matrix(list(evaluation.classes), evaluation.confusion_matrix)
        roc = evaluation.roc
        classification_metrics.log_roc_curve(roc["fpr"], roc["tpr"], roc["thresholds"])
    record = evaluation.blessing.to_dict()
    blessing.metadata.update(
        {
            "blessed": record["blessed"],
            "reasons": record["reasons"],
            "summary": evaluation.blessing.summary(),
            "baseline_uri": record["baseline_uri"] or "",
            "candidate_metrics": record["candidate_metrics"],
            "baseline_metrics": record["baseline_metrics"] or {},
            "reference": record.get("reference") or "",
            "reference_metrics": record.get("reference_metrics") or {},
            # the headline metrics' and the baseline difference's: a few numbers, whatever the data's width
            "intervals": dict(evaluation.intervals or {}),
            "global_step": int(evaluation.global_step),
            "based_on": based_on,
            "fingerprint": registry.fingerprint("blessing", blessing.uri, {}),
            "importance": importance,
        }
    )
    log.info("evaluation: %s", evaluation.blessing.summary())


def describe_importance(evaluation: Evaluation, blessing: Artifact) -> dict[str, Any]:
    """Writes the evaluation's feature importance whole to importance.json in the Blessing; returns the bounded
    part its metadata keeps: the figures' setting, the MAX_IMPORTANCE most important features of each ranking and
    the file's URI ({} when importance was off)."""
    importance = evaluation.importance
    if not importance:
        return {}
    uri = storage.join(blessing.uri, IMPORTANCE_FILE)
    storage.write_text(uri, json.dumps(importance, indent=2, sort_keys=True))
    attributions = importance.get("attributions") or {}
    return {
        "metric": importance["metric"],
        "higher_is_better": importance["higher_is_better"],
        "rows": importance["rows"],
        "repeats": importance["repeats"],
        "features": len(importance["permutation"]),
        "permutation": _top(importance["permutation"]),
        "attribution_output": attributions.get("output", ""),
        "attributions": _top(attributions.get("features", [])),
        "note": importance.get("note", ""),
        "uri": uri,
    }


def _top(ranking: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first MAX_IMPORTANCE entries of a ranking, each name cut to MAX_NAME characters."""
    out = []
    for entry in ranking[:MAX_IMPORTANCE]:
        name = entry["feature"]
        out.append({**entry, "feature": name if len(name) <= MAX_NAME else name[: MAX_NAME - 1] + "…"})
    return out


def describe_slices(evaluation: Evaluation, slice_metrics: Metrics, blessing: Artifact) -> None:
    """The sliced metrics: the full table as slices.json inside the Blessing, its bounded part (the worst slices,
    the counts, the file's URI) in the Blessing's metadata, one scalar per slice and metric in `slice_metrics`.
    Nothing when no slice was configured (metadata `slices` is then {})."""
    table = evaluation.slices
    if table is None:
        blessing.metadata["slices"] = {}
        return
    uri = storage.join(blessing.uri, SLICES_FILE)
    storage.write_text(uri, json.dumps(table, indent=2, sort_keys=True))
    require_output(uri, "the sliced metrics")
    for name, value in slices.flat_metrics(table).items():
        slice_metrics.log_metric(name, value)
    blessing.metadata["slices"] = slices.shown(table, uri)


def describe_report(report: HTML, verdict: Markdown, written: WrittenReport) -> None:
    """The HTML report and the Markdown verdict: the verdict, the title, and their content fingerprints."""
    require_output(written.html_uri, "the evaluation report")
    require_output(written.markdown_uri, "the evaluation's Markdown verdict")
    blessing = written.inputs.blessing
    verdict_fingerprint = registry.fingerprint("verdict", written.markdown_uri, {})
    for artifact, fingerprint_ in ((report, written.fingerprint), (verdict, verdict_fingerprint)):
        artifact.metadata.update(
            {
                "blessed": blessing.blessed,
                "summary": blessing.summary(),
                "title": written.inputs.title,
                "fingerprint": fingerprint_,
            }
        )


def describe_predictions(predictions: Dataset, result: PredictResult) -> None:
    """Predictions Dataset: row count, shards, manifest, where the encoded raw rows are; the fingerprint covers
    the prediction shards (the manifest beside them records the paths they were read from)."""
    for shard in result.shards:
        require_output(shard, "a prediction shard")
    encoded = result.manifest.get("raw", {}).get("encoded")
    if encoded:
        require_output(storage.join(encoded, "manifest.json"), "the encoded rows' manifest")
    predictions.metadata.update(
        {
            "count": int(result.count),
            "shards": list(result.shards),
            "manifest": dict(result.manifest),
            "scored_rows_uri": encoded or "",
            "fingerprint": registry.fingerprint("predictions", predictions.uri, {"shards": list(result.shards)}),
        }
    )


def describe_skew(predictions: Dataset) -> None:
    """Predictions Dataset: the skew check's verdict and its worst features, read from the skew.json beside the
    predictions (none with `predict.skew=off`); and, when the check
    warned, its one line as the artifact's "warning", which a Vertex AI run's webhook alert reads
    (`estimator_lib.cloud.alerts.alert_vertex_run`)."""
    report = skew.read_report(predictions.uri)
    if report is not None:
        head = skew.headline(report)
        predictions.metadata["skew"] = head
        if head["warning"]:
            predictions.metadata[WARNING_KEY] = head["warning"]


def describe_export(exported: Model, export: ExportResult) -> None:
    """Exported Model: SavedModel directory, tag sets, the names of each tag set's signatures, the checkpoint it
    holds; the fingerprint covers its graphs and variables (`saved_model_fingerprint`: not its folder's
    time-stamped name, not the paths in assets.extra), `files_fingerprint` every file, as a published copy's
    LATEST records it.

    The signatures' inputs (one per feature) stay in the SavedModel's export_metadata.json (`signatures_uri`):
    an artifact's metadata travels on the command line of every stage that reads the artifact, and a wide
    model's inputs do not fit there (4,000 features took 1.1 MB; one argument may take 128 KiB)."""
    require_output(storage.join(export.export_dir, "saved_model.pb"), "the exported SavedModel")
    signatures_uri = storage.join(export.export_dir, METADATA_FILE)
    require_output(signatures_uri, "the export's metadata")
    exported.metadata.update(
        {
            "export_dir": export.export_dir,
            "tag_sets": [list(tags) for tags in export.tag_sets],
            "signatures": {tags: sorted(named) for tags, named in export.signatures.items()},
            "signatures_uri": signatures_uri,
            "features": len(export.metadata["serving"]["raw_inputs"]),
            "checkpoint": export.metadata["checkpoint"],
            "global_step": int(export.metadata["global_step"]),
            "fingerprint": registry.fingerprint("exported", exported.uri, {"export_dir": export.export_dir}),
            "files_fingerprint": fingerprint_directory(export.export_dir),
        }
    )


def describe_serving_check(checked: Artifact, result: Mapping[str, Any]) -> None:
    """The serving check's record (serving_check.json, `serving_check.write_record`): rows checked, signatures
    called, the largest difference per output, the tolerance and what was compared. Bounded: a built-in model
    has two signatures of two outputs at most, a user's as many as their export has (the whole record is the
    file)."""
    path = storage.join(checked.uri, SERVING_CHECK_FILE)
    require_output(path, "the serving check's record")
    checked.metadata.update(
        {
            "rows_checked": int(result["rows_checked"]),
            "signatures": list(result["signatures"]),
            "skipped": dict(result["skipped"]),
            "max_abs_diff": {s: dict(outputs) for s, outputs in result["max_abs_diff"].items()},
            "rtol": float(result["rtol"]),
            "atol": float(result["atol"]),
            "compared": result["compared"],
            "record_uri": path,
            "fingerprint": registry.serving_check_fingerprint(result),
        }
    )
    log.info("serving check: %s rows agree on %s", result["rows_checked"], ", ".join(result["signatures"]) or "-")


def describe_release(publication: Artifact, release: Release, based_on: str, exported_fingerprint: str) -> None:
    """Publication record (publication.json, `adapter.write_publication`): whether and where the model was
    published, why, and the LATEST version the decision was based on. The fingerprint covers what was decided:
    published or not, which export (its fingerprint) or why not; not the version's time-stamped name."""
    path = storage.join(publication.uri, PUBLICATION_FILE)
    require_output(path, "the publication record")
    published = release.published
    decided = registry.publication_fingerprint(published is not None, exported_fingerprint, release.reason)
    publication.metadata.update(
        {
            "published": published is not None,
            "publish_reason": release.reason,
            "published_uri": published.uri if published else "",
            "published_version": published.version if published else "",
            "based_on": based_on,
            "fingerprint": decided,
        }
    )
    log.info("release: %s", release.reason)


def describe_registration(registered: Model, registration: Registration) -> None:
    """Registered Model: a registered model's uri is the SavedModel directory its version serves, and its metadata
    names the registry model and version; otherwise registration.json (and the metadata) say why there is none."""
    record = dataclasses.asdict(registration)
    if registration.registered:
        registered.uri = registration.artifact_uri
        require_output(storage.join(registered.uri, "saved_model.pb"), "the registered SavedModel")
    else:
        storage.write_text(storage.join(registered.uri, REGISTRATION_FILE), json.dumps(record, indent=2))
    registered.metadata.update({**record, "version_name": registration.version_name})
    log.info("register: %s", registration.reason)
