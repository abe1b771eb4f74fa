"""The run's summary (summary.json) from its outputs: metrics, verdict, artifacts, data, fingerprints, config."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

from components import records, registry
from estimator_lib import storage
from estimator_lib.config import JobConfig
from pipelines import runs


def copy_report(outputs: Mapping[str, Any], folder: runs.RunFolder) -> str:
    """Copies the evaluate stage's HTML report into the run folder (OUTPUT/runs/<id>/report.html); its path."""
    storage.write_bytes(folder.report, storage.read_bytes(outputs["report"].uri))
    return folder.report


def _number(value: Any) -> Any:
    """Metadata ints come back from the local runner as floats; give whole numbers back as ints."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def strict_record(strict: Optional[Mapping[str, Any]]) -> Optional[dict[str, Any]]:
    """The train stage's TPU-strict record (its counts as ints: metadata numbers come through KFP as floats);
    None when strict mode was off."""
    if not strict:
        return None
    counts = {name: _number(count) for name, count in strict["counts"].items()}
    return {**strict, "checks": _number(strict["checks"]), "counts": counts}


def validation_summary(dataset: Any) -> dict[str, Any]:
    """The prepare stage's data validation; its row counts read back as ints (KFP metadata numbers are floats)."""
    checked = dict(dataset.metadata.get("validation", {}))
    if "rows" in checked:
        checked["rows"] = {side: int(count) for side, count in checked["rows"].items()}
    return checked


def data_summary(dataset: Any) -> dict[str, Any]:
    """What preparation did with the rows, from the prepared manifest: counts per split, quarantined rows (and
    where they are), columns with no value in a split, and the manifest's notes."""
    manifest = json.loads(storage.read_text(dataset.metadata["manifest_uri"]))
    counts = {k: _number(v) for k, v in manifest["counts"].items()}
    missing = manifest.get("missing", {})
    all_missing = {
        split: sorted(c for c, n in columns.items() if n == counts.get(split) and n > 0)
        for split, columns in missing.items()
    }
    quarantined = int(manifest["rows"]["quarantined"])
    return {
        "counts": counts,
        "rows": manifest["rows"]["total"],
        "quarantined": quarantined,
        "quarantine_uri": storage.join(dataset.uri, "quarantine.jsonl") if quarantined else "",
        "columns_all_missing": {split: cols for split, cols in all_missing.items() if cols},
        "notes": list(manifest.get("notes", [])),
    }


def trained_job(model_uri: str) -> JobConfig:
    """The job config the train stage ran, as it recorded it beside the checkpoints (exact JSON; the artifact's
    metadata went through KFP, whose numbers are floats)."""
    return JobConfig.from_json(storage.read_text(storage.join(model_uri, records.JOB_CONFIG_FILE)))


def serving_summary(checked: Any) -> dict[str, Any]:
    """The serving check: rows checked, signatures called (and left out, why), the largest difference per output,
    the tolerance, what was compared and where its record is."""
    keys = ("signatures", "skipped", "max_abs_diff", "rtol", "atol", "compared", "record_uri")
    return {"rows_checked": _number(checked.metadata["rows_checked"]), **{k: checked.metadata[k] for k in keys}}


def importance_summary(blessing: Any) -> dict[str, Any] | None:
    """The evaluation's most important features, as the Blessing's metadata keeps them (the full ranking is in
    its importance.json, `uri`); None when feature importance was off."""
    importance = dict(blessing.metadata.get("importance") or {})
    if not importance:
        return None
    counts = {k: int(_number(importance[k])) for k in ("rows", "repeats", "features")}
    return {**importance, **counts}


def intervals_summary(blessing: Any) -> dict[str, Any] | None:
    """The bootstrap intervals of the headline metrics (and the paired difference with the baseline), with the
    counts and the seed as ints (KFP metadata numbers are floats); None for a user model."""
    intervals = dict(blessing.metadata.get("intervals") or {})
    if not intervals:
        return None
    counts = {k: int(_number(intervals[k])) for k in ("replicates", "seed", "auc_replicates") if k in intervals}
    return {**intervals, **counts}


def slices_summary(blessing: Any) -> dict[str, Any] | None:
    """The worst slices, the counts and where the full table is (slices.json in the evaluate artifact), with row
    counts as ints (KFP metadata numbers are floats); None when the run named no slice."""
    shown = dict(blessing.metadata.get("slices") or {})
    if not shown:
        return None
    worst = [{**entry, "rows": _number(entry["rows"])} for entry in shown["worst"]]
    counts = {name: _number(shown[name]) for name in ("count", "judged", "min_rows")}
    return {**shown, **counts, "worst": worst}


def summarize(outputs: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The run's results: eval metrics, verdict, artifact URIs, data, predictions, export and publication,
    fingerprints, config, and where each stage's manifest is."""
    dataset, model, exported = outputs["dataset"], outputs["model"], outputs["exported"]
    blessing, predictions, publication = outputs["blessing"], outputs["predictions"], outputs["publication"]
    metrics = {k: float(v) for k, v in outputs["metrics"].metadata.items() if k != "blessed"}
    counts = {k: _number(v) for k, v in dataset.metadata["counts"].items()}
    return {
        "metrics": metrics,
        "blessed": bool(blessing.metadata["blessed"]),
        # bootstrap intervals of the headline metrics and of the difference with the baseline (None: a user model)
        "intervals": intervals_summary(blessing),
        "blessing": {
            "summary": blessing.metadata["summary"],
            "reasons": list(blessing.metadata["reasons"]),
            "candidate_metrics": dict(blessing.metadata["candidate_metrics"]),
            "baseline_metrics": dict(blessing.metadata["baseline_metrics"]),
            "baseline_uri": blessing.metadata["baseline_uri"],
            "based_on": blessing.metadata["based_on"],
        },
        "importance": importance_summary(blessing),
        "slices": slices_summary(blessing),
        "artifacts": {key: outputs[artifact.key].uri for key, artifact in registry.SUMMARY_ARTIFACTS},
        "dataset": {
            "counts": counts,
            "schema_uri": dataset.metadata["schema_uri"],
            "task": dataset.metadata["task"],
        },
        "data": data_summary(dataset),
        # TensorBoard reads the training summaries here and the evaluations' in its eval*/ subdirectories.
        "tensorboard_logdir": model.uri,
        "validation": validation_summary(dataset),
        "strict": strict_record(model.metadata.get("strict")),
        "model": {
            "uri": model.uri,
            "global_step": _number(model.metadata["global_step"]),
            "trained_steps": _number(model.metadata.get("trained_steps", model.metadata["global_step"])),
            "budget": _number(model.metadata.get("budget", model.metadata["global_step"])),
            "stopped": model.metadata.get("stopped", ""),
        },
        "predictions": {
            "uri": predictions.uri,
            "count": _number(predictions.metadata["count"]),
            "data": arguments["predict_data"],
            "shards": list(predictions.metadata["shards"]),
        },
        "export": {
            "uri": exported.metadata["export_dir"],
            "tag_sets": [list(t) for t in exported.metadata["tag_sets"]],
            "signatures": {k: sorted(v) for k, v in exported.metadata["signatures"].items()},
            "published": bool(publication.metadata["published"]),
            "published_uri": publication.metadata["published_uri"],
            "published_version": publication.metadata["published_version"],
            "reason": publication.metadata["publish_reason"],
        },
        "serving": serving_summary(outputs["serving_check"]),
        "fingerprints": {name: outputs[name].metadata["fingerprint"] for name in registry.SUMMARY_FINGERPRINTS},
        # Read back through its type: metadata numbers come through KFP as floats, the config's ints stay ints.
        "config": {**arguments, "job_config": trained_job(model.uri).settings_read()},
        "manifests": {stage: records.manifest_uri(outputs[a.key].uri) for stage, a in registry.HEADLINE.items()},
    }
