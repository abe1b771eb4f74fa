"""End to end: a wide table publishes, and a run of it that failed at release resumes and publishes.

Each stage starts with its parameters and its input artifacts' metadata in one command-line argument, KFP's
`--executor_input` (the local runner and Vertex AI alike), and Linux takes at most 128 KiB in one argument. The
export's signatures, one input per column, once travelled there to the release stage: past about 460 columns
nothing could be published (`OSError: [Errno 7] Argument list too long`), and resuming failed the same way.
Per-column data now stays in files inside the artifacts; the test reads every stage's executor input back from
the run's log (KFP's executor logs it) and holds the largest to a bound that does not grow with the columns.

The release fails first for a real reason: a file stands where the publish root's `versions/` directory goes
(as a full disk or a read-only mount would stop it). Once it is gone, the same command resumes the run and
publishes. One wide pipeline run in all (slow: `pytest -m "not slow"` skips it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from estimator_lib import fingerprints, release, storage
from estimator_lib.export import read_export_metadata
from pipelines import runs
from pipelines.local.kfp_patches import stage_of

pytestmark = pytest.mark.slow

# 4,000 columns is the acceptance case (about 11 minutes here: TensorFlow's export of a 4,000-input graph); the
# suite runs 600 (past the ~460 where nothing could publish; every stage's time grows with the columns) to stay
# in its time budget: WIDE_TABLE_COLUMNS=4000 runs the full case.
COLUMNS, ROWS = int(os.environ.get("WIDE_TABLE_COLUMNS", "600")), 300
# The largest executor input a stage may start with, whatever the width: 4 bytes a column would be more.
MAX_EXECUTOR_INPUT = 16 * 1024
FAST = ["--set", "training.train_steps=20", "--set", "model.family=linear", "--set", "prepare.num_workers=1"]
# 20 steps do not reach the linear reference fitted to convergence: that check is not what this test is about.
FAST += ["--set", "blessing.reference_margin=null"]
STAGES = ("resolve", "prepare", "train", "evaluate", "batch_predict", "export", "serving_check", "release")
KFP_LOG_LINE = "]: Got executor_input:"


def wide_csv(path: str) -> str:
    """ROWS rows of COLUMNS numeric features f0, f1, ... and a 3-class label c0/c1/c2. Every column carries a little
    of the class (a per-class mean of 0.5 standard deviations, as pixels of an image do), so 20 linear steps
    separate the classes and the model is blessed."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, COLUMNS))
    labels = np.arange(ROWS) % 3
    features = (rng.normal(size=(ROWS, COLUMNS)) + 0.5 * centers[labels]).round(3)
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join([f"f{i}" for i in range(COLUMNS)] + ["label"]) + "\n")
        for row, label in zip(features, labels):
            f.write(",".join(map(str, row)) + f",c{label}\n")
    return path


def run_cli(output: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "pipelines", "run-local", "--output", output, *FAST, *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800, check=False)


def executor_inputs(log_path: str) -> list[tuple[str, int]]:
    """(task, bytes) of every stage start in a run's log: the executor input the local runner passed on the
    stage's command line, measured as the runner writes it there (`json.dumps`, from the copy KFP's executor
    logs with an indent)."""
    with open(log_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    found, task = [], None
    for i, line in enumerate(lines):
        if "Executing task '" in line:
            task = line.split("Executing task '")[1].rstrip("'")
        if not line.endswith(KFP_LOG_LINE):
            continue
        indent = lines[i + 1][: len(lines[i + 1]) - len(lines[i + 1].lstrip())]
        end = lines.index(indent + "}", i + 1)
        given = json.loads("\n".join(lines[i + 1 : end + 1]))
        found.append((task, len(json.dumps(given))))
    return found


@pytest.fixture(scope="module")
def wide_run(tmp_path_factory):
    """The wide table run until its release fails (a file where versions/ goes), then, that file gone, resumed:
    {"root": the publish root, "failed": the failed attempt's summary, "latest_after_failure": the version
    LATEST named then, "summary": the resumed run's summary, "log": the run's log (both attempts)}."""
    work = tmp_path_factory.mktemp("wide")
    output, data = str(work / "out"), wide_csv(str(work / "wide.csv"))
    root = os.path.join(output, "published")
    os.makedirs(root)
    with open(os.path.join(root, release.VERSIONS), "w", encoding="utf-8") as f:
        f.write("in the way of versions/\n")
    failed = run_cli(output, "--data", data, "--label", "label")
    assert failed.returncode == 1, failed.stdout[-3000:] + failed.stderr[-3000:]
    first, latest_after_failure = runs.last_run(output).read_summary().to_dict(), release.latest_version(root)
    os.remove(os.path.join(root, release.VERSIONS))
    resumed = run_cli(output, "--data", data, "--label", "label", "--resume")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    folder = runs.last_run(output)
    return {
        "root": root,
        "failed": first,
        "latest_after_failure": latest_after_failure,
        "summary": folder.read_summary().to_dict(),
        "log": folder.log,
    }


def test_the_first_attempt_failed_at_release_for_the_blocked_publish_root_alone(wide_run):
    first = wide_run["failed"]
    assert first["status"] == "failed" and first["stage"] == "release", first["error"]
    assert first["error"].startswith("FileExistsError") and "Argument list too long" not in first["error"]
    assert wide_run["latest_after_failure"] == "none"  # nothing published
    # Every stage started in that attempt, release included: none was refused its command line.
    started = executor_inputs(wide_run["log"])[: len(STAGES)]
    assert sorted(stage_of(task) for task, _ in started) == sorted(STAGES)


def test_the_resumed_run_reuses_the_finished_stages_and_publishes(wide_run):
    summary = wide_run["summary"]
    assert summary["run"]["id"] == wide_run["failed"]["run"]["id"] and summary["run"]["attempts"] == 2
    assert {"prepare", "train", "evaluate", "batch_predict", "export"} <= set(summary["run"]["reused"])
    export = summary["export"]
    assert summary["blessed"] and export["published"], summary["blessing"]["summary"]
    latest = release.latest(wide_run["root"])
    assert (latest.version, latest.uri) == (export["published_version"], export["published_uri"])
    assert storage.is_committed(latest.uri) and os.path.exists(os.path.join(latest.uri, "saved_model.pb"))
    assert latest.fingerprint == fingerprints.fingerprint_directory(export["uri"])  # the export it reused, copied whole


def test_no_stage_starts_with_a_command_line_that_grows_with_the_columns(wide_run):
    measured = executor_inputs(wide_run["log"])  # both attempts
    assert len(measured) == 2 * len(STAGES)
    task, largest = max(measured, key=lambda m: m[1])
    assert largest < MAX_EXECUTOR_INPUT, f"{task} started with a {largest:,}-byte executor input"


def test_the_signatures_are_whole_in_the_export_and_named_in_its_metadata(wide_run):
    export = wide_run["summary"]["export"]
    signatures = read_export_metadata(export["uri"])["signatures"]
    assert len(signatures["serve"]["raw:predict"]["inputs"]) == COLUMNS
    assert len(signatures["serve,tpu"]["raw:predict"]["inputs"]) == COLUMNS
    assert {"predict", "raw:predict", "classification", "serving_default"} <= set(export["signatures"]["serve,tpu"])


def test_next_weeks_run_warm_starts_from_it_and_publishes_with_its_data_validated(wide_run):
    """A second run of the table into the same publish root, warm-started from the published model, validates
    its data against the published model's (a figure per column, which once travelled on every later stage's
    command line as the Dataset's metadata) and publishes."""
    output = os.path.dirname(wide_run["root"])
    data = os.path.join(os.path.dirname(output), "wide.csv")
    again = run_cli(
        output, "--data", data, "--label", "label", "--warm-start", "latest", "--set", "blessing.min_improvement=-1"
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    folder = runs.last_run(output)
    summary = folder.read_summary().to_dict()
    assert summary["validation"]["status"] in ("passed", "warned") and summary["export"]["published"]
    with open(summary["validation"]["details_uri"], encoding="utf-8") as f:
        drift = json.load(f)["drift"]
    assert {f"f{i}" for i in range(COLUMNS)} <= set(drift)  # every column's figures, in the Dataset's file
    task, largest = max(executor_inputs(folder.log), key=lambda m: m[1])
    assert largest < MAX_EXECUTOR_INPUT, f"{task} started with a {largest:,}-byte executor input"
