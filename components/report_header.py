"""The evaluation report's header: which run, since when, on what data, with what code and model.

The evaluate stage writes the report before the run ends, so the duration runs from the first stage of this run
whose manifest it can read (prepare's, else train's, else its own start) to the report. A stage reused from
another run (its task directory is in another run's directory) is not counted: its time was spent there. The
run's name is the directory of its tasks: "<pipeline>-<run id>" in a local run, the PipelineJob's name on
Vertex AI (both runners put each task's outputs in <pipeline root>/<run>/<task>/).
"""

from __future__ import annotations

import datetime
import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from components import records
from estimator_lib import manifest as stage_manifest
from estimator_lib import storage
from estimator_lib.config import JobConfig
from estimator_lib.evaluation.report import RunHeader

AFTER_EVALUATE = "batch prediction, export, the serving check and release run after it"


def now() -> str:
    """The current time, as stage manifests write it (ISO 8601 UTC, whole seconds)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _run_dir(uri: str) -> str:
    return posixpath.dirname(records.task_dir(uri).rstrip("/"))


def _started(uri: str, run_dir: str) -> str | None:
    """When the stage that wrote `uri` started, if it ran in `run_dir` and recorded a manifest."""
    path = records.manifest_uri(uri)
    if _run_dir(uri) != run_dir or not storage.exists(path):
        return None
    return json.loads(storage.read_text(path)).get("started")


def _code(versions: Mapping[str, Any]) -> str:
    """The commit of a checkout (marked when modified), else the package's version and the image."""
    if versions.get("commit"):
        return f"commit {versions['commit'][:12]}" + (" (modified)" if versions.get("modified") else "")
    image = f", image {versions['image']}" if versions.get("image") else ""
    return f"{stage_manifest.PACKAGE} {versions.get(stage_manifest.PACKAGE) or 'version unknown'}{image}"


def _data(manifest: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    return tuple((str(d["name"]), int(d["rows"])) for d in manifest.get("inputs") or () if "rows" in d)


def run_header(
    report_uri: str, stages: Sequence[tuple[str, str]], job: JobConfig, manifest: Mapping[str, Any], started: str
) -> RunHeader:
    """The header of the report written to `report_uri`.

    Args:
      stages: (stage name, an output URI of it) of the stages before evaluate, in run order (prepare, train).
      job: the trained model's job config; manifest: the prepared data's manifest.
      started: when this evaluate stage started (ISO 8601 UTC).
    """
    run_dir = _run_dir(report_uri)
    counted = [(name, _started(uri, run_dir)) for name, uri in stages]
    counted = [(name, time) for name, time in counted if time]
    first = min([time for _, time in counted] + [started])
    names = [name for name, _ in counted] + ["evaluate"]
    covers = f"{', '.join(names)} until this report; {AFTER_EVALUATE}"
    model = job.model.described()
    fingerprint = str(manifest.get("input_fingerprint") or manifest.get("fingerprint") or "")
    versions = records.environment({})["versions"]
    return RunHeader(
        posixpath.basename(run_dir), first, now(), covers, _data(manifest), fingerprint, _code(versions), model
    )


def no_baseline(baseline: str, based_on: str) -> str:
    """Why an evaluation has no baseline, from the evaluate stage's `baseline` argument (what resolve decided)
    and `based_on` (the LATEST version under the publish root, "none" when nothing is published). Without the
    root's path: the report is the same bytes in whichever output folder the same run is made."""
    if based_on == "none":
        return "nothing is published under the publish root yet"
    if baseline == "none":
        return "a new lineage (the published model predicts another label or task), or --baseline none"
    return f"no model at {baseline}"
