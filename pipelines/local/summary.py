"""The run's summary (summary.json) from its outputs: metrics, verdict, artifacts, data, fingerprints, config."""

from __future__ import annotations

import dataclasses
import html
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
    """Writes the evaluate stage's HTML report into the run folder (OUTPUT/runs/<id>/report.html), with the skew
    check of the rows batch prediction scored after it (`skew_section`, before the data's section; none with
    `predict.skew=off`); its path."""
    page = storage.read_text(outputs["report"].uri)
    skew = skew_summary(outputs["predictions"])
    if skew is not None:
        at = page.find("<h2>Data</h2>")
        at = at if at >= 0 else page.rfind("</body>")
        page = page[:at] + skew_section(skew) + page[at:]
    storage.write_text(folder.report, page)
    return folder.report


def skew_section(skew: Mapping[str, Any]) -> str:
    """The run report's section on the skew check (`skew_summary`'s headline): the verdict, each of the worst
    flagged features' reading and figures beyond their limits, the predictions' reading when they moved, and where
    the whole skew.json is."""
    worst = "".join(
        f"<li><b>{html.escape(f['feature'])}</b>: {html.escape(f['reading'])} ("
        + html.escape(", ".join(f"{b} {f['figures'][b]:g}" for b in f["breaches"]))
        + ")</li>"
        for f in skew["worst"]
    )
    moved = f"<p>The predictions moved: {html.escape(skew['predictions'])}</p>" if skew.get("predictions") else ""
    return (
        '<section id="skew"><h2>Skew check of the scored rows</h2>'
        f"<p>{html.escape(skew['summary'])} (<code>predict.skew={html.escape(skew['mode'])}</code>)</p>"
        + (f"<ul>{worst}</ul>" if worst else "")
        + moved
        + f"<p>Every feature's figures against its limits: <code>{html.escape(skew['uri'])}</code></p></section>"
    )


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
