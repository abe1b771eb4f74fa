"""Preparation for a run that continues a published model: its schema, then a check of the data against its data.

A run that warm-starts from a published model, or compares with one, prepares its data against that model (the
reference): the schema the model was trained with is continued (`prepare(reference=...)`: vocabularies only
grow, normalisation and label classes are kept), and the new training split's distribution is validated against
the reference's (`validation.validate_data`) before anything trains. Both come from the export metadata every
export carries (`schema`, `data_profile`), so a published version is a complete reference on its own.

`prepare_continuing` is the prepare stage's one call.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, Optional

from estimator_lib import storage
from estimator_lib.config import PrepareConfig, ValidationConfig
from estimator_lib.config.run import NO_MODEL
from estimator_lib.data import validation
from estimator_lib.data.prepare import Passes, PrepareResult, prepare
from estimator_lib.schema import Schema

# Where an export keeps its metadata (`estimator_lib.export.saved_model.METADATA_FILE`; not imported from there,
# which would build the estimator stack to read one JSON file).
EXPORT_METADATA = "assets.extra/export_metadata.json"
REPORT_FILE = "validation.md"


@dataclasses.dataclass(frozen=True)
class Reference:
    """What a published model says about the data it was trained on.

    Attributes:
      uri: the model's SavedModel directory.
      schema: the schema it was trained with.
      profile: its training split's distribution; None for a model exported before profiles were recorded.
    """

    uri: str
    schema: Schema
    profile: Optional[Dict[str, Any]]


def load_reference(model_dir: str) -> Reference:
    """The schema and data profile recorded in an export (a published version or an export directory)."""
    path = storage.join(model_dir, EXPORT_METADATA)
    if not storage.exists(path):
        raise FileNotFoundError(
            f"{model_dir} has no {EXPORT_METADATA}, so its schema is unknown; give a model exported by this "
            "pipeline, or start cold (--warm-start none --baseline none)"
        )
    metadata = json.loads(storage.read_text(path))
    return Reference(model_dir, Schema.from_dict(metadata["schema"]), metadata.get("data_profile"))


@dataclasses.dataclass(frozen=True)
class Continued:
    """A preparation and its validation report (written to `report_uri`)."""

    prepared: PrepareResult
    report: validation.ValidationReport
    report_uri: str


def unreferenced(lineage: str) -> str:
    """The resolve stage's reference for a run that continues no published model: "none" when none was given or
    found (the same dataset bytes however that was asked), "none (a new lineage: why)" when one of another lineage
    was left out (`lineage`: `release.other_lineage`'s reason), which `prepare_continuing` takes as no reference,
    its skipped validation giving the reason."""
    return f"{NO_MODEL} (a new lineage: the published model {lineage})" if lineage else NO_MODEL


def prepare_continuing(
    config: PrepareConfig,
    output_dir: str,
    reference_model: Optional[str],
    checks: ValidationConfig,
    report_uri: str,
    passes: Optional[Passes] = None,
) -> Continued:
    """Prepares `config.data` into `output_dir` continuing `reference_model`'s schema, then validates the data
    against the reference's and writes the Markdown report to `report_uri`.

    Args:
      config: what to prepare.
      output_dir: where the preparation is published.
      reference_model: the published model the run continues (a SavedModel directory with export metadata), or
        None or `unreferenced`'s "none (why)": the schema is inferred and nothing is validated, the report
        saying why.
      checks: the validation thresholds and what a breach does.
      report_uri: where the Markdown report goes.
      passes: who runs preparation's passes (`prepare.prepare`'s; None: this host's worker processes).

    Raises:
      DataError: the data cannot continue the reference (a new label class, a retyped column), or, with
        `checks.on_breach="fail"`, `validation.DataValidationError` naming each breach.
    """
    why = reference_model[len(NO_MODEL) + 2 : -1] if (reference_model or "").startswith(f"{NO_MODEL} (") else ""
    reference = load_reference(reference_model) if reference_model and not why else None
    prepared = prepare(config, output_dir, reference=reference.schema if reference else None, passes=passes)
    report = validation.skipped(reference.uri if reference else "", why)
    if reference is not None and reference.profile is not None:
        report = validation.validate_data(
            reference.profile,
            prepared.profile(),
            checks,
            reference.uri,
            new_columns=prepared.manifest.get("ignored_columns", ()),
            dropped_columns=prepared.manifest.get("absent_columns", ()),
        )
    storage.write_text(report_uri, report.markdown())
    validation.check(report, report_uri)
    return Continued(prepared, report, report_uri)
