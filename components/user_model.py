"""What the components do differently for a user's own model_fn: the prepared records in place of prepared
rows, and their description.

A run trains a user model when its job names one (`job.model.model_fn`); its prepare stage then prepared
TFRecords (`estimator_lib.model.user.prepare`), which each later stage reads back with `load`. The stages'
work is `estimator_lib.model.user.stages`; this module holds no ML logic.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from kfp.dsl import Dataset, Markdown

from components.adapter import require_output
from estimator_lib import storage
from estimator_lib.config import JobConfig, PrepareConfig
from estimator_lib.model.user import package
from estimator_lib.model.user.prepare import FEATURE_SPEC, MANIFEST, PreparedRecords, load_records
from estimator_lib.release import fingerprint

log = logging.getLogger("components")
USER_TASK = "user model_fn"


def load(dataset_uri: str) -> PreparedRecords:
    """The prepared records of a user model's run."""
    return load_records(dataset_uri)


def patterns(config: PrepareConfig) -> list[str]:
    """What a records preparation reads: its data, its eval data, and the feature spec file."""
    return [*config.data, *config.eval_data, *([config.feature_spec] if config.feature_spec else [])]


def code_identity(code: str | None) -> dict[str, Any]:
    """What names the user's code in a stage's record: a local folder by its content fingerprint (so a stage
    reruns when the code changes), a staged wheel by its URI (its version is its fingerprint)."""
    if not code:
        return {"code": "installed"}
    if os.path.isdir(code):
        return {"code": code, "fingerprint": package.fingerprint(code)[0]}
    return {"code": code}


def code_record(job: JobConfig) -> dict[str, Any]:
    """{"user_code": its identity} for a stage that runs a user's model_fn (so it reruns when the code changes,
    even when training gives the same variables); {} for a built-in model."""
    return {"user_code": code_identity(job.model.code)} if job.model.model_fn else {}


def describe_dataset(dataset: Dataset, prepared: PreparedRecords) -> None:
    """Prepared records: split counts, where the feature spec and manifest are, the label, the fingerprint."""
    spec_uri = storage.join(dataset.uri, FEATURE_SPEC)
    require_output(spec_uri, "the prepared feature spec")
    dataset.metadata.update(
        {
            "counts": dict(prepared.counts),
            "schema_uri": spec_uri,
            "manifest_uri": storage.join(dataset.uri, MANIFEST),
            "label": prepared.spec.label,
            "task": USER_TASK,
            "classes": [],
            "fingerprint": fingerprint(dataset.uri),
        }
    )


def describe_validation(dataset: Dataset, report: Markdown, text: str, prepared: PreparedRecords) -> None:
    """Writes the records' validation report (every record matched the spec) and records its verdict."""
    storage.write_text(report.uri, text)
    rows = int(prepared.manifest["rows"]["total"])
    summary = f"pass: all {rows} records match the feature spec"
    dataset.metadata["validation"] = {"status": "pass", "summary": summary, "report_uri": report.uri}
    report.metadata.update({"status": "pass", "summary": summary})
    log.info("data validation: %s", summary)


def data_source(config: PrepareConfig, prepared: PreparedRecords) -> dict[str, Any]:
    """The records preparation read, for the stage's manifest: the patterns, each file's size, records and
    sha256, and the fingerprint over them."""
    return {
        "uri": patterns(config),
        "fingerprint": prepared.manifest["input_fingerprint"],
        "files": [dict(described) for described in prepared.manifest["inputs"]],
    }
