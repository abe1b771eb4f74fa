"""End to end on users' CSVs: another label, another task, no code change (`--data x.csv --label y`).

Binary, multi-class and regression CSVs drawn from a known rule (tests/synthetic.py), each through the whole
pipeline with the KFP local runner. Slow: `pytest -m "not slow"` skips them.
"""

from __future__ import annotations

import csv
import json
import os

import pytest
from report_checks import assert_complete_report
from run_fingerprints import compared

from pipelines import cli

pytestmark = pytest.mark.slow


def write_csv(path: str, task: str, label: str, n: int = 300, seed: int = 7) -> str:
    import synthetic

    rows = synthetic.make_rows(n, seed, task)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["x 1", "x-2", "colour", label])
        for row in rows:
            writer.writerow(["" if row[c] is None else row[c] for c in ("x 1", "x-2", "colour", "target")])
    return path


def run(tmp_path, task: str, label: str, *extra: str) -> dict:
    data = write_csv(str(tmp_path / f"{label}.csv"), task, label)
    output = str(tmp_path / "out")
    args = [
        "run-local",
        "--data",
        data,
        "--label",
        label,
        "--output",
        output,
        "--set",
        "training.train_steps=200",
        "--set",
        "prepare.num_workers=1",
        *extra,
    ]
    assert cli.main(args) == 0
    with open(os.path.join(output, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def check_common(summary: dict, label: str, task: str) -> None:
    assert summary["config"]["label"] == label
    assert summary["dataset"]["task"] == task
    assert summary["predictions"]["count"] == summary["dataset"]["counts"]["eval"] > 0
    assert summary["export"]["tag_sets"] == [["serve"], ["serve", "tpu"]]
    assert summary["blessed"] is True, summary["blessing"]
    assert summary["export"]["published"] is True
    with open(summary["report"], encoding="utf-8") as f:  # the run's report, copied into its folder
        assert_complete_report(f.read(), classification=task == "classification")


def test_binary_csv(tmp_path):
    summary = run(tmp_path, "binary", "will_buy")
    check_common(summary, "will_buy", "classification")
    assert summary["metrics"]["accuracy"] >= 0.85
    assert summary["metrics"]["auc"] >= 0.9


def test_multiclass_csv(tmp_path):
    summary = run(tmp_path, "multiclass", "tier")
    check_common(summary, "tier", "classification")
    assert summary["metrics"]["accuracy"] >= 0.7  # three classes
    assert set(json.loads(json.dumps(summary["blessing"]["candidate_metrics"]))) == {
        "accuracy",
        "log_loss",
        "auc",
    }


def test_regression_csv_with_explicit_task(tmp_path):
    summary = run(tmp_path, "regression", "price", "--task", "regression")
    check_common(summary, "price", "regression")
    candidate = summary["blessing"]["candidate_metrics"]
    assert candidate["r2"] >= 0.8
    assert summary["metrics"]["rmse"] == pytest.approx(candidate["rmse"], rel=1e-3)
    assert "dataset" in compared("regression", summary)  # the recorded bytes (tests/run_fingerprints.py)
