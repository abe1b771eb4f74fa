"""End to end: every user-facing output of a regression run names its metrics by the vocabulary.

One regression run (penguins, label body_mass_g): the console of run-local, `show`, summary.json, `diff` (against
a copy of the record whose metrics moved), the report and the evaluate stage's TensorBoard tags each name every
regression metric of `estimator_lib.vocabulary` (r2 included), and no retired name appears in any of them.
Slow: `pytest -m "not slow"` skips it.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest

from estimator_lib import summaries, vocabulary

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
REGRESSION = [m.name for m in vocabulary.METRICS if m.task == vocabulary.REGRESSION]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([TPU_PIPELINE, *args], capture_output=True, text=True, timeout=900, env=env, check=False)


def names_in(text: str) -> set:
    return {name for name in [*REGRESSION, *vocabulary.RETIRED] if re.search(rf"\b{re.escape(name)}\b", text)}


def tensorboard_tags(directory: str, pattern: str = summaries.EVENT_FILE_PREFIX + "*") -> str:
    import tensorflow as tf  # the event files' reader; the CLI under test loads no TensorFlow for show or diff

    paths = glob.glob(os.path.join(directory, pattern), recursive=True)
    assert paths, f"no event file in {directory}"
    return " ".join(v.tag for p in paths for e in tf.compat.v1.train.summary_iterator(p) for v in e.summary.value)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict:
    """Each user-facing output of one regression run, as text, by name."""
    work = tmp_path_factory.mktemp("names")
    output = str(work / "run")
    args = ("--label", "body_mass_g", "--task", "regression", "--set", "prepare.bad_rows=quarantine")
    console = run_cli("run-local", "--output", output, *args, "--set", "training.train_steps=50")
    assert console.returncode == 0, console.stdout[-4000:] + console.stderr[-4000:]
    path = os.path.join(output, "summary.json")
    with open(path, encoding="utf-8") as f:
        summary = json.load(f)
    moved = dict(summary, metrics={k: v * 1.01 for k, v in summary["metrics"].items()})
    moved_path = str(work / "moved.json")
    with open(moved_path, "w", encoding="utf-8") as f:
        json.dump(moved, f)
    diff = run_cli("diff", path, moved_path)
    assert diff.returncode == 1, diff.stdout + diff.stderr
    with open(summary["report"], encoding="utf-8") as f:
        report = f.read()
    return {
        "console": console.stdout,
        "show": run_cli("show", "--output", output).stdout,
        "summary": json.dumps(summary["metrics"]),
        "diff": diff.stdout,
        "report": report,
        "tensorboard": tensorboard_tags(os.path.join(summary["tensorboard_logdir"], summaries.EVAL_DIR)),
        "every event file": tensorboard_tags(summary["tensorboard_logdir"], f"**/{summaries.EVENT_FILE_PREFIX}*"),
    }


@pytest.mark.parametrize("shown", ["console", "show", "summary", "diff", "report", "tensorboard"])
def test_each_output_names_every_regression_metric_and_no_retired_name(outputs, shown):
    found = names_in(outputs[shown])
    expected = {"rmse", "mae", "r2"} if shown == "console" else set(REGRESSION)  # the console: headline metrics
    assert found == expected, shown


def test_no_tensorboard_tag_of_the_run_has_a_retired_name(outputs):
    assert not names_in(outputs["every event file"]) & set(vocabulary.RETIRED)
