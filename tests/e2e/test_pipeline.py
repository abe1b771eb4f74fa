"""End to end: the README's command runs the whole pipeline on CPU with the KFP local runner (real TensorFlow,
real subprocess components), then second runs against the first run's published model bless or refuse (one
differing only by its seed is refused: the difference is noise).

Slow (a minute or so per run): `pytest -m "not slow"` skips them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import typing

import pytest
from report_checks import assert_complete_report
from run_fingerprints import compared

from estimator_lib import release, storage
from estimator_lib.config import BlessingConfig, JobConfig, PrepareConfig, RunConfig
from estimator_lib.data.embedded import default_dataset
from estimator_lib.fingerprints import fingerprint_directory, saved_model_fingerprint
from pipelines.local import summary as local_summary

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
PENGUIN_CLASSES = {"Adelie", "Chinstrap", "Gentoo"}


def run_cli(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([TPU_PIPELINE, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False)


def run_local(output: str, *args: str) -> typing.Tuple[subprocess.CompletedProcess, dict]:
    """`tpu-pipeline run-local --output OUTPUT ARGS...`, which must succeed: the process and its summary."""
    proc = run_cli("run-local", "--output", output, *args)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc, load_summary(output)


def settings(*overrides: str) -> typing.List[str]:
    """`--set` arguments, one per override."""
    return [arg for override in overrides for arg in ("--set", override)]


def load_summary(output: str) -> dict:
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def prediction_rows(uri: str) -> list:
    rows = []
    for shard in storage.glob(os.path.join(uri, "predictions-*.jsonl")):
        with open(shard, encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f)
    return rows


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """`tpu-pipeline run-local --output DIR`: the default run, as the README gives it."""
    output = str(tmp_path_factory.mktemp("first"))
    proc, summary = run_local(output)
    assert "deprecated" not in proc.stderr and "WARNING:tensorflow" not in proc.stderr, proc.stderr  # in the log
    return output, proc.stdout, summary


def test_default_run_prints_where_the_summary_is(first_run):
    output, stdout, _ = first_run
    assert stdout.rstrip().splitlines()[-1] == f"summary: {os.path.join(output, 'summary.json')}"
    assert "blessed: True" in stdout


def test_default_run_has_its_own_folder_log_and_summary(first_run):
    """OUTPUT/runs/<id>/ holds the run's artifacts, log and summary; OUTPUT/latest and OUTPUT/summary.json name
    it; nothing of the run's temporary files is left; the log holds no terminal colour codes."""
    output, stdout, summary = first_run
    run = summary["run"]
    folder = os.path.join(output, "runs", run["id"])
    assert summary["status"] == "ok" and summary["stage"] is None and summary["error"] is None
    assert run["dir"] == folder and run["attempts"] == 1 and run["reused"] == []
    assert os.readlink(os.path.join(output, "latest")) == os.path.join("runs", run["id"])
    assert load_summary(folder) == summary
    assert sorted(os.listdir(folder)) == ["pipeline-root", "pipeline.log", "report.html", "summary.json"]  # no tmp/
    assert summary["artifacts"]["train"].startswith(os.path.join(folder, "pipeline-root", ""))
    with open(run["log"], encoding="utf-8") as f:
        log = f.read()
    assert "\x1b[" not in log and "\x1b[" not in stdout
    assert "Executing task 'train-model'" in log  # the runner's own lines are in the log, the console has ours
    events = [
        re.sub(r" \(.*\)$", "", line[11:])
        for line in stdout.splitlines()
        if re.match(r"\[\d\d:\d\d:\d\d\] ", line) and " still running " not in line  # not the heartbeats
    ]
    stages = ("resolve", "prepare", "train", "evaluate", "batch_predict", "export", "serving_check", "release")
    assert sorted(events) == sorted(f"{stage}: {event}" for stage in stages for event in ("running", "done"))
    assert events[:4] == ["resolve: running", "resolve: done", "prepare: running", "prepare: done"]
    assert events[-2:] == ["release: running", "release: done"]
    assert set(run["seconds"]) == set(stages)  # each stage's wall seconds, as the console showed them
    assert all(re.search(rf"\] {stage}: done \({run['seconds'][stage]:.1f} s\)$", stdout, re.M) for stage in stages)
    # Nothing was published before the first run: no schema to continue, no data to compare with.
    assert summary["validation"]["status"] == "skipped" and os.path.exists(summary["validation"]["report_uri"])
    assert (
        "  data validation: skipped: this run continues no published model, so there is no data to compare with"
        in stdout
    )
    assert summary["data"] == {
        "counts": summary["dataset"]["counts"],
        "rows": 344,
        "quarantined": 0,
        "quarantine_uri": "",
        "columns_all_missing": {},
        "notes": [],
        "unlabelled": 0,
    }


def test_default_run_metrics_are_sane_and_blessed(first_run):
    _, _, summary = first_run
    metrics = summary["metrics"]
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    assert metrics["accuracy"] >= 0.9  # chance is 1/3, the most frequent class 0.44
    assert metrics["auc"] >= 0.95
    assert 0.0 < metrics["log_loss"] < 0.5
    assert summary["blessed"] is True
    assert summary["blessing"]["reasons"] == [] and summary["blessing"]["baseline_uri"] == ""
    assert summary["blessing"]["candidate_metrics"]["accuracy"] == pytest.approx(metrics["accuracy"])


def test_default_run_artifacts_predictions_and_export(first_run):
    _, _, summary = first_run
    stages = {"prepare", "train", "evaluate", "batch_predict", "export", "serving_check", "release"}
    assert set(summary["artifacts"]) == stages | {"report", "verdict"}
    assert all(os.path.exists(uri) for uri in summary["artifacts"].values())
    counts = summary["dataset"]["counts"]
    assert counts["train"] + counts["valid"] + counts["eval"] == 344
    rows = prediction_rows(summary["predictions"]["uri"])
    assert summary["predictions"]["count"] == counts["eval"] == len(rows)
    assert len({r["key"] for r in rows}) == len(rows)
    for row in rows:
        assert row["class"] in PENGUIN_CLASSES and set(row["probabilities"]) == PENGUIN_CLASSES
        assert sum(row["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    export = summary["export"]
    assert export["tag_sets"] == [["serve"], ["serve", "tpu"]]
    assert os.path.exists(os.path.join(export["uri"], "saved_model.pb"))
    assert {"serving_default", "predict", "classification"} <= set(export["signatures"]["serve,tpu"])
    model = summary["model"]  # the best checkpoint by validation loss, within the epoch budget
    assert 0 < model["global_step"] <= model["trained_steps"] <= model["budget"]


def test_default_run_serves_its_export_as_it_predicted(first_run):
    """The serving check: the export, served in a fresh process, gives the eval rows' predictions (the first 64;
    the split has fewer)."""
    _, stdout, summary = first_run
    serving = summary["serving"]
    rows = summary["dataset"]["counts"]["eval"]
    assert serving["rows_checked"] == rows < 64 and serving["signatures"] == ["predict", "raw:predict"]
    assert (serving["rtol"], serving["atol"], serving["skipped"]) == (1e-5, 1e-6, {})
    for outputs in serving["max_abs_diff"].values():
        assert sorted(outputs) == ["class_ids", "probabilities"] and max(outputs.values()) <= 1e-6
    assert serving["compared"].startswith(f"the first {rows} predicted records of [")
    assert re.search(r"\] serving_check: done \(\d+\.\d s\)", stdout)
    with open(serving["record_uri"], encoding="utf-8") as f:
        assert json.load(f)["max_abs_diff"] == serving["max_abs_diff"]


def test_default_run_copies_its_report_into_the_run_folder_and_prints_where(first_run):
    _, stdout, summary = first_run
    assert summary["report"] == os.path.join(summary["run"]["dir"], "report.html")
    assert f"  report: {summary['report']}" in stdout.splitlines()
    with open(summary["report"], encoding="utf-8") as f:
        document = f.read()
    assert_complete_report(document, classification=True)
    # the evaluate stage's report, with the skew check of the rows batch prediction scored after it
    with open(summary["artifacts"]["report"], encoding="utf-8") as f:
        evaluated = f.read()
    section = local_summary.skew_section(summary["predictions"]["skew"])
    assert document == evaluated.replace("<h2>Data</h2>", section + "<h2>Data</h2>", 1)
    assert '<section id="skew"><h2>Skew check of the scored rows</h2><p>passed: 7 features of ' in document
    with open(summary["artifacts"]["verdict"], encoding="utf-8") as f:
        assert f.read().startswith("# species (classification): model at step ")


def test_default_run_publishes_a_version_with_the_exports_fingerprint(first_run):
    output, _, summary = first_run
    fingerprints = summary["fingerprints"]
    assert set(fingerprints) == {"dataset", "model", "blessing", "predictions", "exported", "publication"}
    assert all(len(v) == 64 and int(v, 16) >= 0 for v in fingerprints.values())
    # The export's fingerprint covers its graphs and variables; a published copy's LATEST fingerprints its files.
    assert saved_model_fingerprint(summary["export"]["uri"]) == fingerprints["exported"]
    latest = release.latest(os.path.join(output, "published"))
    assert summary["blessing"]["based_on"] == "none"  # nothing was published when it was evaluated
    assert summary["export"]["published"] is True
    assert latest.uri == summary["export"]["published_uri"]
    assert latest.fingerprint == fingerprint_directory(summary["export"]["uri"])
    assert saved_model_fingerprint(latest.uri) == fingerprints["exported"]


def test_default_run_records_the_full_config(first_run):
    _, _, summary = first_run
    config = summary["config"]
    assert config["data"] == "embedded:penguins" and config["label"] == "species"
    assert config["job_config"]["tpu"]["strict"] is True and config["job_config"]["tpu"]["use_tpu"] is False
    # The settings left to follow the data, as the train stage resolved them for 257 rows of 7 features
    training = config["job_config"]["training"]
    assert training["max_epochs"] is config["max_epochs"] is None
    assert training["train_steps"] == math.ceil(1600 * 257**0.5 / 64) == 401
    assert training["early_stopping"]["every_steps"] == 100  # about 10 rounds, in whole TPU loops
    assert config["job_config"]["model"]["l2"] == pytest.approx(0.04 * 7 / 257)
    assert config["baseline"] == "auto" and config["warm_start"] == "none"


def test_a_second_run_differing_only_by_seed_is_not_called_an_improvement(first_run, tmp_path):
    """The default run again with another training seed, scored against the first's published model on the same
    eval rows: their paired difference is noise, so it is not blessed (the default `blessing.baseline_test=paired`)
    and LATEST still names the first. The first's summary holds the bootstrap interval of its accuracy. Before
    the tests that publish into the first run's root: its LATEST is the first run's version."""
    first_output, _, first = first_run
    root = os.path.join(first_output, "published")
    assert first["export"]["published"] is True
    accuracy, interval = first["metrics"]["accuracy"], first["intervals"]["metrics"]["accuracy"]
    assert interval["value"] == accuracy and interval["low"] <= accuracy <= interval["high"]
    assert interval["low"] < interval["high"]
    assert (first["intervals"]["replicates"], first["intervals"]["seed"], first["intervals"]["baseline"]) == (
        1000,
        0,
        None,
    )
    latest_before = release.latest(root)
    assert latest_before.uri == first["export"]["published_uri"]
    seed = first["config"]["job_config"]["training"]["seed"] + 1
    _, second = run_local(str(tmp_path / "second"), "--publish-root", root, *settings(f"training.seed={seed}"))
    assert second["blessing"]["baseline_uri"] == latest_before.uri
    paired = second["intervals"]["baseline"]
    assert paired["metric"] == "accuracy" and paired["verdict"] == "no different"
    assert paired["low"] <= 0 <= paired["high"]
    assert second["blessed"] is False
    assert second["blessing"]["reasons"] == [
        f"vs baseline {first['metrics']['accuracy']:.4f}: difference {paired['difference']:+.4f} "
        f"[{paired['low']:+.4f}, {paired['high']:+.4f}] at 0.95, not better beyond the noise "
        "(blessing.baseline_test=paired; 'plain' compares the point values)"
    ]
    assert second["export"]["published"] is False
    assert release.latest(root) == latest_before


def test_warm_started_second_run_is_blessed_against_the_published_baseline(first_run, tmp_path):
    first_output, _, first = first_run
    root = os.path.join(first_output, "published")
    baseline = release.latest(root)
    output = str(tmp_path / "second")
    overrides = settings("training.train_steps=50", "blessing.min_improvement=-0.05", "prepare.num_workers=1")
    proc, summary = run_local(output, "--publish-root", root, "--warm-start", "latest", *overrides)
    assert summary["blessed"] is True, summary["blessing"]
    assert summary["blessing"]["baseline_uri"] == baseline.uri
    # The baseline is scored with the same code on the same rows: its metrics are the first run's.
    assert summary["blessing"]["baseline_metrics"] == pytest.approx(first["blessing"]["candidate_metrics"])
    assert summary["config"]["job_config"]["training"]["warm_start_from"] == baseline.uri
    assert summary["metrics"]["accuracy"] >= 0.9  # 50 steps on top of the published weights, not from scratch
    # The same data as the published model's: its schema is continued and every drift figure is within bounds.
    assert summary["validation"]["status"] == "passed" and summary["validation"]["reference"] == baseline.uri
    assert "  data validation: passed: " in proc.stdout
    assert release.latest(root).uri == summary["export"]["published_uri"] != baseline.uri


def test_second_run_that_must_beat_the_baseline_is_refused_and_publishes_nothing(first_run, tmp_path):
    first_output, _, first = first_run
    root = os.path.join(first_output, "published")
    baseline_uri = first["export"]["published_uri"]
    versions_before = sorted(os.listdir(os.path.join(root, "versions")))
    latest_before = release.latest(root)
    output = str(tmp_path / "refused")
    overrides = settings("training.train_steps=100", "blessing.min_improvement=0.05", "prepare.num_workers=1")
    proc, summary = run_local(output, "--publish-root", root, "--baseline", baseline_uri, *overrides)
    assert summary["blessed"] is False
    [reason] = summary["blessing"]["reasons"]
    # The default paired test: the interval of the difference on the same rows must clear the margin.
    assert (
        reason.startswith("vs baseline") and "not above min_improvement 0.05 (blessing.baseline_test=paired" in reason
    )
    assert "blessed: False" in proc.stdout and "not published" in proc.stdout
    assert summary["export"]["published"] is False and summary["export"]["published_uri"] == ""
    assert summary["export"]["reason"].startswith("not published: not blessed")
    assert os.path.exists(os.path.join(summary["export"]["uri"], "saved_model.pb"))  # exported, not published
    assert sorted(os.listdir(os.path.join(root, "versions"))) == versions_before
    assert release.latest(root) == latest_before


def _int_fields(cls, seen=None) -> tuple:
    """(names of int fields, names of float fields) of a config type and the configs nested in it."""
    ints, floats = set(), set()
    for name, hint in typing.get_type_hints(cls).items():
        args = set(typing.get_args(hint)) | {hint}
        args |= {a for arg in list(args) for a in typing.get_args(arg)}
        if int in args:
            ints.add(name)
        if float in args:
            floats.add(name)
        for arg in args:
            if dataclasses.is_dataclass(arg):
                nested = _int_fields(arg)
                ints, floats = ints | nested[0], floats | nested[1]
    return ints, floats


def _whole_floats(value, path=()):
    """(path, value) of every float at an int-typed key anywhere in a JSON document."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _whole_floats(item, (*path, str(key)))
    elif isinstance(value, list):
        for item in value:
            yield from _whole_floats(item, path)
    elif isinstance(value, float):
        yield path, value


# Counts the project writes besides the config fields.
COUNT_KEYS = {
    "global_step",
    "trained_steps",
    "budget",
    "count",
    "attempts",
    "quarantined",
    "rows",
    "total",
    "written",
    "bad",
}
COUNT_MAPS = {"counts", "missing", "class_counts", "rows"}


def test_every_json_the_run_wrote_keeps_its_integers(first_run):
    """summary.json, the stage records, manifests, schema, job config, blessing, publication: every int-typed
    config field and every count is an int, however many KFP round trips it went through (`"num_cores": 8`,
    `"hidden_units": [64, 32]`, never 8.0)."""
    output, _, summary = first_run
    typed = [_int_fields(cls) for cls in (JobConfig, PrepareConfig, BlessingConfig, RunConfig)]
    int_keys = set().union(*(ints for ints, _ in typed)) - set().union(*(floats for _, floats in typed))
    assert {"num_cores", "hidden_units", "train_batch_size", "seed", "iterations_per_loop"} <= int_keys
    written = [
        os.path.join(directory, name)
        for directory, _, names in os.walk(output)
        for name in names
        if name.endswith(".json") and name != "executor_output.json"  # KFP's own file, not the project's
    ]
    assert len(written) >= 10
    for path in written:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
        bad = [
            (".".join(p), v)
            for p, v in _whole_floats(document)
            if p and (p[-1] in int_keys | COUNT_KEYS or (len(p) > 1 and COUNT_MAPS & set(p[-3:-1])))
        ]
        assert not bad, f"{path}: floats where ints belong: {bad[:5]}"
    job = summary["config"]["job_config"]
    assert job["tpu"]["num_cores"] == 8 and type(job["tpu"]["num_cores"]) is int
    assert job["model"]["hidden_units"] == [64, 32] and all(type(u) is int for u in job["model"]["hidden_units"])


def test_a_run_whose_data_drifted_fails_before_training_naming_the_feature(first_run, tmp_path):
    first_output, _, _ = first_run
    root = os.path.join(first_output, "published")
    latest_before = release.latest(root)
    with open(default_dataset().path, encoding="utf-8") as f:
        text = f.read()
    drifted = tmp_path / "penguins.csv"
    drifted.write_text(text.replace(",Dream,", ",Dream Island,"), encoding="utf-8")  # a renamed category
    output = str(tmp_path / "drifted")
    common = ["run-local", "--output", output, "--publish-root", root, "--data", str(drifted), "--label", "species"]
    proc = run_cli(*common, "--warm-start", "latest", "--set", "prepare.num_workers=1")
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    first_line = proc.stderr.splitlines()[0]
    assert first_line.startswith("tpu-pipeline run-local: error: prepare: DataValidationError: data validation failed")
    assert re.search(r"island: unseen share 0\.3\d+ beyond 0\.1 \(validation.max_unseen_share\)", first_line)
    summary = load_summary(output)
    assert summary["status"] == "failed" and summary["stage"] == "prepare"
    assert release.latest(root) == latest_before


def test_default_run_keeps_its_recorded_bytes(first_run):
    assert "dataset" in compared("embedded", first_run[2])


def test_the_same_run_again_into_its_folder_is_identical_to_the_published_version_and_publishes_nothing(first_run):
    """README's command again, into the first run's folder, against the version the first run published: the same
    data and settings train the same weights, so the verdict is "identical to version V; nothing to publish" (its
    metrics, through the checkpoint's graph, differ from the SavedModel's by rounding), on the console, in
    summary.json and in publication.json, and the run ends ok. Last in the module: it becomes the folder's latest."""
    output, _, first = first_run
    root = os.path.join(output, "published")
    latest = release.latest(root)  # another test may have published a warm-started model over it
    version, uri = first["export"]["published_version"], first["export"]["published_uri"]
    proc, summary = run_local(output, "--baseline", uri)
    message = f"identical to version {version}; nothing to publish"
    assert f"  blessed: False ({message})" in proc.stdout.splitlines()
    assert f"  not published: {message}" in proc.stdout.splitlines()
    assert summary["run"]["id"] != first["run"]["id"] and summary["blessed"] is False
    assert summary["blessing"]["summary"] == message and summary["blessing"]["reasons"] == [message]
    assert summary["blessing"]["baseline_uri"] == uri
    assert summary["export"]["published"] is False and summary["export"]["reason"] == f"not published: {message}"
    with open(os.path.join(summary["artifacts"]["release"], "publication.json"), encoding="utf-8") as f:
        assert json.load(f)["reason"] == f"not published: {message}"
    assert release.latest(root) == latest
