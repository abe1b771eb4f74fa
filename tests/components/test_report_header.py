"""The report's header from the stages' manifests: the run is the directory of its tasks, and the duration
counts only the stages that ran in it."""

from __future__ import annotations

import json
import os

from components import report_header
from estimator_lib.config import JobConfig
from estimator_lib.manifest import MANIFEST_FILE

MANIFEST = {"inputs": [{"name": "a.csv", "rows": 10}, {"name": "b.csv", "rows": 5}], "input_fingerprint": "ab" * 32}


def _stage(run_dir, task, started):
    """An output of a task that recorded a manifest (started at `started`, or none)."""
    os.makedirs(run_dir / task, exist_ok=True)
    if started:
        (run_dir / task / MANIFEST_FILE).write_text(json.dumps({"started": started}), encoding="utf-8")
    return str(run_dir / task / "out")


def test_the_duration_counts_the_stages_of_this_run_only(tmp_path):
    run = tmp_path / "tpu-estimator-pipeline-20261125T211912Z-a1b2c3"
    other = tmp_path / "tpu-estimator-pipeline-20261124T000000Z-ffffff"
    dataset = _stage(other, "prepare-data", "2026-11-24T00:00:05+00:00")  # reused from an earlier run
    model = _stage(run, "train-model", "2026-11-25T21:19:40+00:00")
    report = _stage(run, "evaluate-model", None)
    job = JobConfig().with_overrides({"model.family": "linear"})
    header = report_header.run_header(
        report, [("prepare", dataset), ("train", model)], job, MANIFEST, "2026-11-25T21:20:00+00:00"
    )
    assert header.run == "tpu-estimator-pipeline-20261125T211912Z-a1b2c3"
    assert header.started == "2026-11-25T21:19:40+00:00"
    assert header.covers.startswith("train, evaluate until this report; batch prediction")
    assert header.data == (("a.csv", 10), ("b.csv", 5)) and header.data_fingerprint == "ab" * 32
    assert header.model == "linear family" and header.written >= header.started
    assert header.code.startswith(("commit ", "tpu-estimator-pipelines "))


def test_without_manifests_the_duration_is_the_evaluate_stages_own(tmp_path):
    run = tmp_path / "run"
    job = JobConfig().with_overrides({"model.model_fn": "my_model.model:model_fn"})
    report = _stage(run, "evaluate-model", None)
    header = report_header.run_header(report, [("prepare", report)], job, {}, "2026-11-25T21:20:00+00:00")
    assert (header.started, header.data, header.data_fingerprint) == ("2026-11-25T21:20:00+00:00", (), "")
    assert (
        header.covers.startswith("evaluate until this report")
        and header.model == "your model_fn my_model.model:model_fn"
    )


def test_a_missing_baseline_is_explained_by_what_resolve_decided():
    assert report_header.no_baseline("latest", "none") == ("nothing is published under the publish root yet")
    assert report_header.no_baseline("none", "20261128T232612Z-626784c69f11") == (
        "a new lineage (the published model predicts another label or task), or --baseline none"
    )
    assert report_header.no_baseline("/models/m1", "v1") == "no model at /models/m1"
