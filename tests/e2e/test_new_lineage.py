"""End to end: the README's "your data" command right after its first command starts a new lineage.

`run-local` publishes the embedded penguins model (label 'species') under the default output; `run-local --data
iris.csv --label target` into the same output then starts cold, says so in one console line, compares with
nothing, and exits 0; `--baseline latest` (continuity asked for) is refused before any work, naming the fix.
Slow: `pytest -m "not slow"` skips it.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
SHORT = ("--set", "training.train_steps=200", "--set", "prepare.num_workers=1")


def run_cli(cwd, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [TPU_PIPELINE, *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900, env=env, check=False)


def summary(cwd) -> dict:
    with open(os.path.join(cwd, "runs", "local", "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def test_your_data_after_the_embedded_run_starts_a_new_lineage(tmp_path):
    from sklearn.datasets import load_iris

    first = run_cli(tmp_path, "run-local", *SHORT)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert summary(tmp_path)["export"]["published"] is True  # the penguins model is LATEST
    iris = load_iris()
    with open(tmp_path / "iris.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([[*iris.feature_names, "target"], *([*x, y] for x, y in zip(iris.data, iris.target))])

    refused = run_cli(tmp_path, "run-local", "--data", "iris.csv", "--label", "target", "--baseline", "latest", *SHORT)
    root = os.path.join(tmp_path, "runs", "local", "published")
    assert refused.returncode != 0
    assert (
        f"--baseline latest: the published model under {root} predicts 'species' (classification); this run's label "
        f"is 'target'; give --baseline none, or another --publish-root"
    ) in refused.stdout + refused.stderr

    second = run_cli(tmp_path, "run-local", "--data", "iris.csv", "--label", "target", *SHORT)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    line = (
        f"baseline: none (the published model under {root} predicts 'species' (classification); this run's label is "
        "'target': a new lineage, nothing to compare with or continue)"
    )
    shown = [text for text in second.stdout.splitlines() if line in text]
    assert len(shown) == 1 and shown[0].endswith(f"] resolve: {line}"), second.stdout  # once, on its own line
    ran = summary(tmp_path)
    assert ran["config"]["label"] == "target" and ran["dataset"]["task"] == "classification"
    assert ran["blessing"]["baseline_metrics"] == {} and ran["blessing"]["baseline_uri"] == ""
    assert ran["validation"]["status"] == "skipped"  # no reference: the schema is inferred, nothing is checked
