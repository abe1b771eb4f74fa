"""End to end: `tpu-pipeline tune` runs 6 trials over the learning rate and the hidden units on the embedded
penguins (the first is the default config), and the winner goes through the whole pipeline: evaluated, blessed,
released. Slow (about a minute)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from estimator_lib import release

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")
SPACE = """
metric: accuracy
parameters:
  training.optimizer.learning_rate: {type: float, min: 0.0003, max: 0.03, scale: log}
  model.hidden_units: {type: categorical, values: ["64,32", "32", "16,16"]}
"""


def test_six_trials_find_a_config_at_least_as_good_as_the_default_and_release_it(tmp_path):
    space, output = tmp_path / "space.yaml", str(tmp_path / "out")
    space.write_text(SPACE, encoding="utf-8")
    budget = ["--set", "training.train_steps=100", "--set", "prepare.num_workers=1"]
    argv = [TPU_PIPELINE, "tune", "--space", str(space), "--trials", "6", "--output", output, *budget]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    with open(os.path.join(output, "runs", summary["run"]["id"], "tuning.json"), encoding="utf-8") as f:
        record = json.load(f)
    trials = record["trials"]
    assert [t["number"] for t in trials] == list(range(6))
    assert [t["default"] for t in trials] == [True] + [False] * 5
    assert trials[0]["values"] == {"training.optimizer.learning_rate": 0.001, "model.hidden_units": "64,32"}
    assert (record["metric"], record["direction"], record["split"]) == ("accuracy", "higher", "valid")
    winner = trials[record["winner"]]
    assert winner["objective"] == max(t["objective"] for t in trials) >= trials[0]["objective"]
    assert all(t["objective"] == t["metrics"]["accuracy"] for t in trials)

    # The winner's values are the run's settings, and the run evaluated, blessed and released it.
    training = summary["config"]["job_config"]["training"]
    assert training["optimizer"]["learning_rate"] == winner["values"]["training.optimizer.learning_rate"]
    assert summary["config"]["job_config"]["model"]["hidden_units"] == [
        int(u) for u in winner["values"]["model.hidden_units"].split(",")
    ]
    assert summary["status"] == "ok" and summary["blessed"] is True
    assert summary["export"]["published"] is True
    assert os.path.isdir(summary["export"]["published_uri"])
    assert release.latest_version(os.path.join(output, "published")) == summary["export"]["published_version"]
    assert f"winner: trial {winner['number']} (accuracy=" in proc.stdout
