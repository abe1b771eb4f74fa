"""The run's summary (summary.json) from its outputs: metrics, verdict, artifacts, data, fingerprints, config."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from components import records, registry
from estimator_lib import storage
from estimator_lib.config import JobConfig
from estimator_lib.config.stages import SKEW_FILE
from pipelines import runs
from pipelines.run_summary import Blessing, Dataset, Results, RunSummary, Serving, decode


def copy_report(outputs: Mapping[str, Any], folder: runs.RunFolder) -> str:
    """Copies the evaluate stage's HTML report into the run folder (OUTPUT/runs/<id>/report.html); its path."""
    storage.write_bytes(folder.report, storage.read_bytes(outputs["report"].uri))
    return folder.report


def data_summary(dataset: Any) -> dict[str, Any]:
    """What preparation did with the rows, from the prepared manifest: counts per split, quarantined rows (and
    where they are), unlabelled rows, columns with no value in a split, and the manifest's notes."""
    manifest = json.loads(storage.read_text(dataset.metadata["manifest_uri"]))
    counts = dict(manifest["counts"])
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
        "unlabelled": manifest["rows"].get("unlabelled", 0),
    }


def skew_summary(predictions: Any) -> dict[str, Any] | None:
    """The skew check's headline from the predictions' metadata (`components.artifacts.describe_skew`) and
    where its skew.json is; None when the stage wrote none."""
    headline = predictions.metadata.get("skew")
    return {**headline, "uri": storage.join(predictions.uri, SKEW_FILE)} if headline else None


def trained_job(model_uri: str) -> JobConfig:
    """The job config the train stage ran, as it recorded it beside the checkpoints (exact JSON; the artifact's
    metadata went through KFP, whose numbers are floats)."""
    return JobConfig.from_json(storage.read_text(storage.join(model_uri, records.JOB_CONFIG_FILE)))


def _fields(kind: type, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata's entries that the summary's section `kind` records."""
    return {f.name: metadata[f.name] for f in dataclasses.fields(kind)}


def summarize(outputs: Mapping[str, Any], summary: RunSummary) -> RunSummary:
    """The run's summary with its results: eval metrics, verdict, artifact URIs, data, predictions, export and
    publication, fingerprints, where each stage's manifest is, and the job config training ran."""
    dataset, model, exported = outputs["dataset"], outputs["model"], outputs["exported"]
    blessing, predictions, publication = outputs["blessing"], outputs["predictions"], outputs["publication"]
    published = publication.metadata
    results = {
        "metrics": {k: v for k, v in outputs["metrics"].metadata.items() if k != "blessed"},
        "blessed": blessing.metadata["blessed"],
        "blessing": _fields(Blessing, blessing.metadata),
        # bootstrap intervals (None: a user model), feature importance and slices (None: off)
        **{k: blessing.metadata.get(k) or None for k in ("intervals", "importance", "slices")},
        "artifacts": {key: outputs[artifact.key].uri for key, artifact in registry.SUMMARY_ARTIFACTS},
        "dataset": _fields(Dataset, dataset.metadata),
        "data": data_summary(dataset),
        # TensorBoard reads the training summaries here and the evaluations' in its eval*/ subdirectories.
        "tensorboard_logdir": model.uri,
        "validation": dataset.metadata["validation"],
        "strict": model.metadata.get("strict") or None,
        "model": {
            "uri": model.uri,
            "global_step": model.metadata["global_step"],
            "trained_steps": model.metadata.get("trained_steps", model.metadata["global_step"]),
            "budget": model.metadata.get("budget", model.metadata["global_step"]),
            "stopped": model.metadata.get("stopped", ""),
        },
        "predictions": {
            "uri": predictions.uri,
            "count": predictions.metadata["count"],
            "data": summary.config["predict_data"],
            "shards": predictions.metadata["shards"],
            "skew": skew_summary(predictions),
        },
        "export": {
            "uri": exported.metadata["export_dir"],
            "tag_sets": exported.metadata["tag_sets"],
            "signatures": {k: sorted(v) for k, v in exported.metadata["signatures"].items()},
            **{k: published[k] for k in ("published", "published_uri", "published_version")},
            "reason": published["publish_reason"],
        },
        "serving": _fields(Serving, outputs["serving_check"].metadata),
        "fingerprints": {name: outputs[name].metadata["fingerprint"] for name in registry.SUMMARY_FINGERPRINTS},
        "manifests": {stage: records.manifest_uri(outputs[a.key].uri) for stage, a in registry.HEADLINE.items()},
    }
    # Read back through its type: metadata numbers come through KFP as floats, the config's ints stay ints.
    config = {**summary.config, "job_config": trained_job(model.uri).settings_read()}
    return dataclasses.replace(summary, config=config, results=decode(Results, results, "the run's outputs"))
