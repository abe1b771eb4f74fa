"""`pipelines.run_summary`: a run's summary.json read into its typed value and written back byte for byte (a real
run's, and the partial one of a failed run), KFP's float counts read as ints, and a file that is not a summary
refused with its path and the key."""

from __future__ import annotations

import json
import os

import pytest

from pipelines import runs
from pipelines.run_summary import RunSummary, SummaryError

RECORDED_PATH = os.path.join(os.path.dirname(__file__), "recorded_summary.json")  # a real run's, its paths under /out
with open(RECORDED_PATH, encoding="utf-8") as f:
    RECORDED_TEXT = f.read()
RECORDED = json.loads(RECORDED_TEXT)
STARTED = ("status", "stage", "error", "run", "config", "arguments")  # what a run's summary holds from its start


def test_a_real_runs_summary_reads_into_its_sections_and_writes_back_byte_for_byte(tmp_path):
    summary = RunSummary.read(RECORDED_PATH)
    assert summary.to_json() + "\n" == RECORDED_TEXT
    results = summary.results
    assert (summary.status, summary.stage, summary.error, summary.run.attempts) == ("ok", None, None, 1)
    assert results.model.global_step == 402 and results.predictions.count == 58 and results.blessed is True
    assert results.data.counts == {"eval": 58, "test": 0, "train": 257, "valid": 29}
    assert results.strict.checks == 23 and results.serving.signatures == ["predict", "raw:predict"]
    assert results.intervals.auc_replicates == 1000 and results.slices is None
    assert results.validation.breach_count == 0.0 and results.validation.on_breach == "fail"
    assert summary.report == "/out/runs/20261128T202153Z-9e2234/report.html"
    folder = runs.RunFolder(str(tmp_path), summary.run.id)
    folder.create()
    runs.publish_summary(folder, summary)
    for path in (folder.summary_path, os.path.join(str(tmp_path), runs.SUMMARY_FILE)):
        with open(path, encoding="utf-8") as f:
            assert f.read() == RECORDED_TEXT


def test_a_failed_runs_partial_summary_has_no_results_and_keeps_its_keys():
    run = {k: v for k, v in RECORDED["run"].items() if k not in ("reused", "seconds", "ended")}
    partial = {**{k: RECORDED[k] for k in STARTED}, "status": "failed", "stage": "train", "error": "x", "run": run}
    summary = RunSummary.from_dict(partial)
    assert summary.results is None and summary.report is None and summary.run.ended is None
    assert summary.to_dict() == partial  # stage and error null or not, run without what its end adds
    started = {k: v for k, v in partial.items() if k != "arguments"}  # written before the run's arguments
    assert RunSummary.from_dict({**started, "stage": None}).to_dict() == {**started, "stage": None}


def test_kfp_float_counts_are_read_as_ints_and_a_fraction_is_refused():
    model = {**RECORDED["model"], "global_step": 402.0, "budget": 402.0}
    summary = RunSummary.from_dict({**RECORDED, "model": model})
    assert summary.results.model.global_step == 402 and type(summary.results.model.budget) is int
    assert summary.to_dict() == RECORDED
    with pytest.raises(SummaryError, match=r"^s.json: model.budget is 402.5, not an integer$"):
        RunSummary.from_dict({**RECORDED, "model": {**model, "budget": 402.5}}, "s.json")


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda s: s.pop("manifests"), "missing key manifests; not a run's summary"),
        (lambda s: s.pop("config"), "missing key config; not a run's summary"),
        (lambda s: s["run"].pop("started"), "missing key run.started"),
        (lambda s: s.update(colour="red"), "unknown key colour; not a run's summary"),
        (lambda s: s["export"].update(published="yes"), 'export.published is "yes", not true or false'),
        (lambda s: s["run"].update(attempts=None), "run.attempts is null, not an integer"),
        (lambda s: s["predictions"].update(shards="a.jsonl"), 'predictions.shards is "a.jsonl", not a list'),
        (lambda s: s["data"].update(counts=[]), "data.counts is [], not an object"),
        (lambda s: s["importance"].update(rows="58"), 'importance.rows is "58", not an integer'),
    ],
)
def test_a_file_that_is_not_a_summary_is_refused_naming_the_file_and_the_key(tmp_path, edit, reason):
    data = json.loads(RECORDED_TEXT)
    edit(data)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SummaryError) as caught:
        RunSummary.read(str(path))
    assert str(caught.value) == f"{path}: {reason}" and caught.value.reason == reason


def test_a_file_that_is_no_json_object_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text("{", encoding="utf-8")
    with pytest.raises(SummaryError, match=r"summary.json: not valid JSON: Expecting property name"):
        RunSummary.read(str(path))
    path.write_text("[1]", encoding="utf-8")
    with pytest.raises(SummaryError, match=r"summary.json: the file is not a JSON object \(a run's summary is one\)"):
        RunSummary.read(str(path))
    with pytest.raises(FileNotFoundError):
        RunSummary.read(str(tmp_path / "missing.json"))
