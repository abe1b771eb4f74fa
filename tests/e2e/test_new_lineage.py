"""End to end: README's commands in the order a newcomer types them, on data sets no test ships.

From an empty folder: README's first command (`run-local`: the embedded penguins model, label 'species', is
published under the default output), then the three `run-local` lines of README's "Your data" block, as README
writes them, on tables exported here from scikit-learn (a binary table as `my.csv` with the label `churned`, a
regression table as `prices.csv` with `price`, unlabelled rows as `new/*.csv`). Each exits 0. The first of them
starts a new lineage (another label than the published model's): it says so in one console line, compares with
nothing; `--baseline latest` (continuity asked for) is refused before any work, naming the fix.
Slow: `pytest -m "not slow"` skips it.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import repo

pytestmark = pytest.mark.slow

TPU_PIPELINE = os.path.join(os.path.dirname(sys.executable), "tpu-pipeline")


def run_cli(cwd, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [TPU_PIPELINE, *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900, env=env, check=False)


def summary(cwd) -> dict:
    with open(os.path.join(cwd, "runs", "local", "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def readme_your_data_commands() -> list[list[str]]:
    """The `run-local` lines of README's "Your data" block, as argument lists (comments dropped)."""
    with open(os.path.join(repo.ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    block = re.search(r"## Your data.*?```bash\n(.*?)```", text, re.S).group(1)
    lines = [shlex.split(line, comments=True) for line in block.splitlines()]
    return [words[1:] for words in lines if words[:2] == [".venv/bin/tpu-pipeline", "run-local"]]


def write_csv(path, header, rows) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])


def test_readmes_commands_in_order_on_new_data(tmp_path):
    from sklearn.datasets import load_breast_cancer, load_diabetes

    commands = readme_your_data_commands()
    assert [c[:3] for c in commands] == [["run-local", "--data", f] for f in ("my.csv", "prices.csv", "my.csv")]
    first = run_cli(tmp_path, "run-local")  # README's first command, less its set-up script
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert summary(tmp_path)["export"]["published"] is True  # the penguins model is LATEST

    cancer, prices = load_breast_cancer(), load_diabetes()
    names = [n.replace(" ", "_") for n in cancer.feature_names]
    labelled = [[*x, int(y)] for x, y in zip(cancer.data, cancer.target)]
    write_csv(str(tmp_path / "my.csv"), [*names, "churned"], labelled[:500])
    write_csv(str(tmp_path / "new" / "a.csv"), names, [row[:-1] for row in labelled[500:530]])
    write_csv(str(tmp_path / "new" / "b.csv"), names, [row[:-1] for row in labelled[530:]])
    write_csv(
        str(tmp_path / "prices.csv"),
        [*prices.feature_names, "price"],
        [[*x, y] for x, y in zip(prices.data, prices.target)],
    )

    root = os.path.join(tmp_path, "runs", "local", "published")
    refused = run_cli(tmp_path, *commands[0], "--baseline", "latest")
    assert refused.returncode != 0
    assert (
        f"--baseline latest: the published model under {root} predicts 'species' (classification); this run's label "
        f"is 'churned'; give --baseline none, or another --publish-root"
    ) in refused.stdout + refused.stderr

    ran = []
    for command in commands:
        done = run_cli(tmp_path, *command)
        assert done.returncode == 0, (command, done.stdout[-4000:] + done.stderr[-4000:])
        ran.append((done, summary(tmp_path)))

    (classification, first_summary), (regression, regression_summary), (scored, scored_summary) = ran
    line = (
        f"baseline: none (the published model under {root} predicts 'species' (classification); this run's label is "
        "'churned': a new lineage, nothing to compare with or continue)"
    )
    shown = [text for text in classification.stdout.splitlines() if line in text]
    assert len(shown) == 1 and shown[0].endswith(f"] resolve: {line}"), classification.stdout  # once, on its own line
    assert first_summary["config"]["label"] == "churned" and first_summary["dataset"]["task"] == "classification"
    assert first_summary["blessing"]["baseline_metrics"] == {} and first_summary["blessing"]["baseline_uri"] == ""
    assert regression_summary["dataset"]["task"] == "regression"
    assert regression_summary["config"]["label"] == "price"
    assert scored_summary["config"]["label"] == "churned"
    predictions = scored_summary["predictions"]
    assert predictions["count"] == len(labelled) - 500, predictions  # every unlabelled row of new/*.csv, scored
